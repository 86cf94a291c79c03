package dynamodb_test

import (
	"strings"
	"testing"

	rsdynamodb "github.com/retrysafe/retrysafe/store/dynamodb"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		url, table, region, endpoint, err string
	}{
		"table only":       {url: "dynamodb://retrysafe", table: "retrysafe"},
		"region":           {url: "dynamodb://idem.records?region=eu-west-1", table: "idem.records", region: "eu-west-1"},
		"endpoint":         {url: "dynamodb://t_1?region=us-east-1&endpoint=http%3A%2F%2F127.0.0.1%3A8000", table: "t_1", region: "us-east-1", endpoint: "http://127.0.0.1:8000"},
		"credentials":      {url: "dynamodb://AKIA:secret@retrysafe", err: "credentials in the URL are refused"},
		"unknown param":    {url: "dynamodb://retrysafe?access_key=x", err: `unknown parameter "access_key"`},
		"path":             {url: "dynamodb://retrysafe/other", err: "unexpected path"},
		"short table":      {url: "dynamodb://ab", err: "table name"},
		"bad table":        {url: "dynamodb://tab~le", err: "table name"},
		"other scheme":     {url: "redis://retrysafe", err: "scheme"},
		"endpoint no http": {url: "dynamodb://retrysafe?endpoint=127.0.0.1:8000", err: "endpoint"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			table, region, endpoint, err := rsdynamodb.ParseURL(tc.url)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseURL(%q) = %v, want an error containing %q", tc.url, err, tc.err)
				}
				return
			}
			if err != nil || table != tc.table || region != tc.region || endpoint != tc.endpoint {
				t.Fatalf("ParseURL(%q) = %q, %q, %q, %v; want %q, %q, %q", tc.url, table, region, endpoint, err, tc.table, tc.region, tc.endpoint)
			}
		})
	}
}
