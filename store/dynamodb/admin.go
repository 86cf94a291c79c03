package dynamodb

import (
	"cmp"
	"context"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// The operator's view ([admin.Admin]). DynamoDB keeps no order across
// partition keys, so List, Find without a scope and Stats read the whole
// table (a paginated, strongly consistent Scan) and sort in Go: O(n) read
// units in the table's size, for an operator's occasional look, never for
// a request's path. Find in one scope is one GetItem.

// scan calls f for every item of the table, page by page.
func (s *Store) scan(ctx context.Context, op string, withBody bool, f func(map[string]types.AttributeValue) error) error {
	in := &dynamodb.ScanInput{TableName: s.table, ConsistentRead: aws.Bool(true)}
	if !withBody {
		in.ProjectionExpression = aws.String(projectionNoBody)
		in.ExpressionAttributeNames = map[string]string{"#ttl": TTLAttribute}
	}
	p := dynamodb.NewScanPaginator(s.client, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return translate(op, err)
		}
		for _, item := range out.Items {
			if err := f(item); err != nil {
				return err
			}
		}
	}
	return nil
}

// records returns every record for which keep is true, sorted by scope
// and key.
func (s *Store) records(ctx context.Context, op string, withBody bool, keep func(*retrysafe.Record) bool) ([]*retrysafe.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	recs := []*retrysafe.Record{}
	err := s.scan(ctx, op, withBody, func(item map[string]types.AttributeValue) error {
		rec, err := decodeItem(item, withBody)
		if err != nil {
			return retrysafe.Unavailable(op, err)
		}
		if keep(rec) {
			recs = append(recs, rec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(recs, compareRecords)
	return recs, nil
}

func compareRecords(a, b *retrysafe.Record) int {
	return cmp.Or(cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Key, b.Key))
}

// List implements [admin.Admin].
func (s *Store) List(ctx context.Context, p *admin.ListParams) ([]*retrysafe.Record, error) {
	recs, err := s.records(ctx, "list", p.WithBodies, func(rec *retrysafe.Record) bool {
		return cmp.Or(cmp.Compare(rec.Scope, p.AfterScope), cmp.Compare(rec.Key, p.AfterKey)) > 0 && p.Matches(rec)
	})
	if err != nil {
		return nil, err
	}
	return recs[:min(len(recs), p.PageSize())], nil
}

// Find implements [admin.Admin].
func (s *Store) Find(ctx context.Context, p *admin.FindParams) ([]*retrysafe.Record, error) {
	if !p.OneScope() {
		return s.records(ctx, "find", p.WithBodies, func(rec *retrysafe.Record) bool { return rec.Key == p.Key })
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	item, err := s.getItem(ctx, "find", p.Scope, p.Key, p.WithBodies)
	if err != nil {
		return nil, err
	}
	if item == nil {
		return []*retrysafe.Record{}, nil
	}
	rec, err := decodeItem(item, p.WithBodies)
	if err != nil {
		return nil, retrysafe.Unavailable("find", err)
	}
	return []*retrysafe.Record{rec}, nil
}

// Stats implements [admin.Admin]: one Scan of the table, without bodies.
func (s *Store) Stats(ctx context.Context, p *admin.StatsParams) (*admin.Stats, error) {
	recs, err := s.records(ctx, "stats", false, func(*retrysafe.Record) bool { return true })
	if err != nil {
		return nil, err
	}
	return admin.StatsOf(recs, p), nil
}

// Delete implements [admin.Admin]: it removes the record whatever its
// state or owner.
func (s *Store) Delete(ctx context.Context, scope, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:           s.table,
		Key:                 keyOf(scope, key),
		ConditionExpression: aws.String("attribute_exists(pk)"),
	})
	if _, failed := conditionFailed(err); failed {
		return retrysafe.ErrNotFound
	}
	return translate("delete", err)
}

// Sweep implements [admin.Sweeper]: a Scan that reads only the keys of
// expired records (a filter on the server), then one DeleteItem per
// record, conditional on the record still being expired, so that a
// record extended, taken over or completed meanwhile is kept. DynamoDB's
// TTL deletes the same records on its own, some time later, without
// costing write units; Sweep is for tables without TTL enabled, and for
// tests. BatchSize bounds the items one Scan page returns.
func (s *Store) Sweep(ctx context.Context, p *admin.SweepParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	retention, err := p.Retention()
	if err != nil {
		return 0, err
	}
	const cond = "(st = :c AND ex <= :now) OR (st = :p AND lu <= :retired)"
	values := map[string]types.AttributeValue{
		":c": strAttr(stateCompleted), ":p": strAttr(stateProcessing),
		":now": timeAttr(p.Now), ":retired": timeAttr(p.Now.Add(-retention)),
	}
	in := &dynamodb.ScanInput{
		TableName:                 s.table,
		ConsistentRead:            aws.Bool(true),
		ProjectionExpression:      aws.String("pk"),
		FilterExpression:          aws.String(cond),
		ExpressionAttributeValues: values,
	}
	if p.BatchSize > 0 {
		in.Limit = aws.Int32(int32(min(p.BatchSize, 1<<30)))
	}
	var keys []map[string]types.AttributeValue
	pages := dynamodb.NewScanPaginator(s.client, in)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return 0, translate("sweep", err)
		}
		keys = append(keys, out.Items...)
	}
	n := 0
	for _, key := range keys {
		_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName:                 s.table,
			Key:                       key,
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeValues: values,
		})
		if _, failed := conditionFailed(err); failed {
			continue // changed meanwhile: kept
		}
		if err != nil {
			return n, translate("sweep", err)
		}
		n++
	}
	return n, nil
}

// Ping implements [admin.Pinger]: DescribeTable, through the client's
// retries.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: s.table})
	return translate("ping", err)
}

// CheckReady implements [admin.ReadyChecker]: one DescribeTable without
// the client's retries, so that an unreachable endpoint is reported at
// once.
func (s *Store) CheckReady(ctx context.Context) error {
	_, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: s.table}, noRetry)
	return translate("ready", err)
}

// CheckDurability implements [admin.DurabilityChecker]. A write DynamoDB
// acknowledged is durable in its region, so the only setting it reports
// is a global table (replicas in other regions): their replication is
// asynchronous, last writer wins, so two claims of one key in two regions
// may both succeed. Point every instance at one region's endpoint.
func (s *Store) CheckDurability(ctx context.Context) ([]admin.DurabilityWarning, error) {
	out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: s.table})
	if err != nil {
		return nil, translate("durability", err)
	}
	if out.Table == nil || len(out.Table.Replicas) == 0 {
		return nil, nil
	}
	regions := ""
	for i, r := range out.Table.Replicas {
		if i > 0 {
			regions += ","
		}
		regions += aws.ToString(r.RegionName)
	}
	return []admin.DurabilityWarning{{
		Setting: "global_table_replicas",
		Value:   regions,
		Risk:    "a global table replicates asynchronously with last-writer-wins, so claims of one key in two regions can both win; send every claim to one region",
	}}, nil
}
