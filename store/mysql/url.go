package mysql

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	driver "github.com/go-sql-driver/mysql"
)

// URLParamTable is the URL query parameter that names the records table
// (Config.Table). [Open] removes it before connecting.
const URLParamTable = "retrysafe_table"

// DefaultPort is the port of a mysql:// URL that names none.
const DefaultPort = "3306"

// ParseURL turns a URL of the form
//
//	mysql://USER[:PASSWORD]@HOST[:PORT]/DB[?PARAM=VALUE&…]
//
// into a go-sql-driver/mysql configuration, and returns the value of its
// retrysafe_table parameter ("" when absent) separately. USER and PASSWORD
// are percent-decoded; PORT defaults to 3306; an IPv6 host is written in
// brackets. Every other parameter is one of the driver's DSN parameters
// (tls, timeout, readTimeout, charset, …) and is checked by the driver.
// A URL without a database is an error: the store's table lives in one.
func ParseURL(rawURL string) (*driver.Config, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("mysql: %w", redactErr(err))
	}
	if u.Scheme != "mysql" {
		return nil, "", fmt.Errorf("mysql: URL scheme %q, want mysql", u.Scheme)
	}
	if u.Host == "" {
		return nil, "", errors.New("mysql: URL has no host")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, "", fmt.Errorf("mysql: URL path %q must name one database: mysql://user@host:3306/db", u.Path)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = DefaultPort
	}
	q := u.Query()
	table := q.Get(URLParamTable)
	q.Del(URLParamTable)
	// The driver's own parser checks every parameter; the address, the
	// user and the password are set afterwards so that no character in
	// them needs DSN escaping.
	dsn := "/"
	if len(q) > 0 {
		dsn += "?" + q.Encode()
	}
	dc, err := driver.ParseDSN(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("mysql: URL parameters: %w", err)
	}
	dc.Net = "tcp"
	dc.Addr = net.JoinHostPort(host, port)
	dc.DBName = db
	if u.User != nil {
		dc.User = u.User.Username()
		dc.Passwd, _ = u.User.Password()
	}
	if !q.Has("timeout") {
		dc.Timeout = openDialTimeout
	}
	return dc, table, nil
}

// parse reads a mysql:// URL or a driver DSN.
func parse(s string) (*driver.Config, string, error) {
	if strings.HasPrefix(s, "mysql://") {
		return ParseURL(s)
	}
	dc, err := driver.ParseDSN(s)
	if err != nil {
		return nil, "", fmt.Errorf("mysql: %w", err)
	}
	table := dc.Params[URLParamTable]
	delete(dc.Params, URLParamTable)
	if dc.Timeout == 0 {
		dc.Timeout = openDialTimeout
	}
	return dc, table, nil
}

// redactErr drops the URL (which may hold a password) from a url.Parse
// error.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
