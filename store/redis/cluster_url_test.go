package redis_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	redisstore "github.com/retrysafe/retrysafe/store/redis"
)

func TestParseClusterURL(t *testing.T) {
	t.Parallel()
	o, err := redisstore.ParseClusterURL("redis+cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002/0?dial_timeout=2s&max_redirects=5")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.1:7000", "10.0.0.2:7001", "[::1]:7002"}; !slices.Equal(o.Addrs, want) {
		t.Errorf("Addrs = %q, want %q", o.Addrs, want)
	}
	if o.Username != "app" || o.Password != "s3cret" || o.DialTimeout != 2*time.Second || o.MaxRedirects != 5 || o.TLSConfig != nil {
		t.Errorf("options = user %q password %q dial %s redirects %d tls %v", o.Username, o.Password, o.DialTimeout, o.MaxRedirects, o.TLSConfig != nil)
	}
	o, err = redisstore.ParseClusterURL("rediss+cluster://redis-0.example:6380")
	if err != nil || o.TLSConfig == nil || o.TLSConfig.ServerName != "redis-0.example" || len(o.Addrs) != 1 {
		t.Errorf("rediss+cluster: %+v, %v; want TLS for redis-0.example", o, err)
	}
	for name, tc := range map[string]struct{ url, want string }{
		"scheme":     {"redis://a:1", "scheme"},
		"database":   {"redis+cluster://:pw@a:1/2", "only database 0"},
		"no host":    {"redis+cluster://?dial_timeout=1s", "no seed node"},
		"no port":    {"redis+cluster://a:1,b", `"b"`},
		"addr param": {"redis+cluster://a:1?addr=b:2", "HOST:PORT,HOST:PORT"},
		"option":     {"redis+cluster://a:1?bogus=1", "bogus"},
	} {
		_, err := redisstore.ParseClusterURL(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ParseClusterURL(%q) = %v, want an error with %q", name, tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw@") {
			t.Errorf("%s: error shows the password: %v", name, err)
		}
	}
}
