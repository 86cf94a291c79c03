package dynamodb

import (
	"context"
	"fmt"
	"net/url"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// tableName is DynamoDB's rule for table names.
var tableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

// Open returns a store for a URL of the form
//
//	dynamodb://TABLE[?region=REGION][&endpoint=URL]
//
// (the gateway's --store). The client comes from the SDK's default
// configuration chain (environment, shared config and credentials files,
// SSO, web identity, container and instance roles): credentials are never
// taken from the URL. region overrides the chain's region, and endpoint
// its endpoint (DynamoDB Local, dynalite, a VPC endpoint). cfg.Table is
// set from the URL. Open makes no call: the table is created by
// [Store.Migrate] (retrysafe migrate) or [CreateTable].
func Open(ctx context.Context, rawURL string, cfg Config) (*Store, error) {
	table, region, endpoint, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("retrysafe/dynamodb: load the AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, fmt.Errorf("retrysafe/dynamodb: no region: add ?region=REGION to the URL or set AWS_REGION")
	}
	client := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	cfg.Table = table
	return New(client, cfg)
}

// ParseURL splits a dynamodb:// URL into its table, region and endpoint
// (the last two may be empty). It refuses user information (credentials
// come from the SDK's chain, never from the URL), a path, and parameters
// other than region and endpoint.
func ParseURL(rawURL string) (table, region, endpoint string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", "", fmt.Errorf("retrysafe/dynamodb: %w", err)
	}
	if u.Scheme != "dynamodb" {
		return "", "", "", fmt.Errorf("retrysafe/dynamodb: scheme %q, want dynamodb://TABLE", u.Scheme)
	}
	if u.User != nil {
		return "", "", "", fmt.Errorf("retrysafe/dynamodb: credentials in the URL are refused; they come from the AWS SDK's default chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, a role)")
	}
	if u.Path != "" && u.Path != "/" {
		return "", "", "", fmt.Errorf("retrysafe/dynamodb: unexpected path %q; write dynamodb://TABLE?region=REGION", u.Path)
	}
	table = u.Host
	if !tableName.MatchString(table) {
		return "", "", "", fmt.Errorf("retrysafe/dynamodb: table name %q: 3 to 255 letters, digits, _ - or .", table)
	}
	q := u.Query()
	for name := range q {
		if name != "region" && name != "endpoint" {
			return "", "", "", fmt.Errorf("retrysafe/dynamodb: unknown parameter %q (region and endpoint are accepted)", name)
		}
	}
	region, endpoint = q.Get("region"), q.Get("endpoint")
	if endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return "", "", "", fmt.Errorf("retrysafe/dynamodb: endpoint %q: want an http:// or https:// URL", endpoint)
		}
	}
	return table, region, endpoint, nil
}

// Migrate creates the store's table with its Time to Live attribute when
// it is absent ([CreateTable]); retrysafe migrate calls it.
func (s *Store) Migrate(ctx context.Context) error {
	return CreateTable(ctx, s.client, *s.table)
}
