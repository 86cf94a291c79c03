package redis

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// clientFromURL returns a ClusterClient for a redis+cluster:// or
// rediss+cluster:// URL, else a Client for goredis.ParseURL's forms.
func clientFromURL(raw string) (goredis.UniversalClient, error) {
	scheme, _, _ := strings.Cut(raw, "://")
	switch strings.ToLower(scheme) {
	case "redis+cluster", "rediss+cluster":
		opts, err := ParseClusterURL(raw)
		if err != nil {
			return nil, err
		}
		return goredis.NewClusterClient(opts), nil
	}
	opts, err := goredis.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	return goredis.NewClient(opts), nil
}

// ParseClusterURL parses the seed-node form of a Redis Cluster,
//
//	redis+cluster://[user:password@]host:port[,host:port…][/0][?options]
//
// (rediss+cluster:// for TLS) into options for goredis.NewClusterClient.
// The options are goredis.ParseClusterURL's (dial_timeout, max_redirects,
// read_only, …); each host:port is a seed node, and the client discovers
// the others. A cluster has only database 0.
func ParseClusterURL(raw string) (*goredis.ClusterOptions, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	var base string
	switch strings.ToLower(scheme) {
	case "redis+cluster":
		base = "redis"
	case "rediss+cluster":
		base = "rediss"
	}
	if !ok || base == "" {
		return nil, fmt.Errorf("cluster URL %q: the scheme must be redis+cluster:// or rediss+cluster://", redactUserinfo(raw))
	}
	rest, query, _ := strings.Cut(rest, "?")
	// The user information may contain '/' only percent-encoded, so the
	// first '/' after the last '@' starts the path.
	userinfo, hostsAndPath := "", rest
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		userinfo, hostsAndPath = rest[:i+1], rest[i+1:]
	}
	hosts, path, _ := strings.Cut(hostsAndPath, "/")
	if path != "" && path != "0" {
		return nil, fmt.Errorf("cluster URL %q: a Redis Cluster has only database 0, not %q", redactUserinfo(raw), path)
	}
	if hosts == "" {
		return nil, fmt.Errorf("cluster URL %q: no seed node; write redis+cluster://HOST:PORT[,HOST:PORT…]", redactUserinfo(raw))
	}
	addrs := strings.Split(hosts, ",")
	for _, a := range addrs {
		if a == "" || !strings.Contains(a, ":") {
			return nil, fmt.Errorf("cluster URL %q: seed node %q is not HOST:PORT", redactUserinfo(raw), a)
		}
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("cluster URL %q: query: %w", redactUserinfo(raw), err)
	}
	if q.Has("addr") {
		return nil, errors.New("cluster URL: list the seed nodes as HOST:PORT,HOST:PORT, not as addr= parameters")
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u := base + "://" + userinfo + addrs[0]
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	opts, err := goredis.ParseClusterURL(u)
	if err != nil {
		return nil, fmt.Errorf("cluster URL %q: %w", redactUserinfo(raw), err)
	}
	return opts, nil
}

// redactUserinfo hides everything before the last '@' of the authority, for
// error messages.
func redactUserinfo(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authEnd := strings.IndexAny(rest, "/?")
	if authEnd < 0 {
		authEnd = len(rest)
	}
	if i := strings.LastIndex(rest[:authEnd], "@"); i >= 0 {
		return scheme + "://xxxxx" + rest[i:]
	}
	return raw
}
