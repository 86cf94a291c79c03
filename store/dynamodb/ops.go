package dynamodb

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/headercodec"
)

// Get implements [retrysafe.Store] with one strongly consistent GetItem.
func (s *Store) Get(ctx context.Context, p *retrysafe.GetParams) (*retrysafe.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	item, err := s.getItem(ctx, "get", p.Scope, p.Key, true)
	if err != nil {
		return nil, err
	}
	if item == nil {
		return nil, retrysafe.ErrNotFound
	}
	rec, err := decodeItem(item, true)
	if err != nil {
		return nil, retrysafe.Unavailable("get", err)
	}
	if rec.Expired(p.Now) {
		return nil, retrysafe.ErrNotFound // expiry on read, swept or not
	}
	return rec, nil
}

// fenced is the condition of every owner's write.
const fenced = "tok = :tok AND st = :p"

func fenceValues(token string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{":tok": strAttr(token), ":p": strAttr(stateProcessing)}
}

// Extend implements [retrysafe.Store]: one UpdateItem conditional on the
// owner's token.
func (s *Store) Extend(ctx context.Context, p *retrysafe.ExtendParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.Token == "" {
		return retrysafe.ErrLeaseLost // no record has an empty token
	}
	values := fenceValues(p.Token)
	values[":now"] = timeAttr(p.Now)
	set := "SET ua = :now"
	var names map[string]string
	if p.Abandon {
		set += ", ab = :true"
		values[":true"] = &types.AttributeValueMemberBOOL{Value: true}
	} else {
		leaseUntil := p.Now.Add(p.Lease)
		set += ", lu = :lu, #ttl = :ttl"
		values[":lu"] = timeAttr(leaseUntil)
		values[":ttl"] = ttlSeconds(leaseUntil.Add(s.retention))
		names = map[string]string{"#ttl": TTLAttribute}
	}
	remove := ""
	if cp := p.Checkpoint; cp != nil {
		set += ", cpn = :cpn, cpa = :now"
		values[":cpn"] = strAttr(cp.Name)
		if len(cp.Data) > 0 {
			set += ", cpd = :cpd"
			values[":cpd"] = binAttr(cp.Data)
		} else {
			remove = " REMOVE cpd"
		}
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.table,
		Key:                       keyOf(p.Scope, p.Key),
		UpdateExpression:          aws.String(set + remove),
		ConditionExpression:       aws.String(fenced),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	if _, failed := conditionFailed(err); failed {
		return retrysafe.ErrLeaseLost
	}
	return translate("extend", err)
}

// Complete implements [retrysafe.Store]: one UpdateItem conditional on
// the owner's token, which writes the whole response at once (an item
// write is atomic for readers). A record whose response would not fit in
// DynamoDB's item limit is left as it was, with an error wrapping
// [ErrItemTooLarge].
func (s *Store) Complete(ctx context.Context, p *retrysafe.CompleteParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.Token == "" {
		return retrysafe.ErrLeaseLost // no record has an empty token
	}
	var header []byte
	status := 0
	var body []byte
	if p.Response != nil {
		header = headercodec.Encode(p.Response.Header)
		status = p.Response.Status
		body = p.Response.Body
	}
	if size := len(header) + len(body) + 2*len(p.Key) + 2*len(p.Scope) + 1024; size > ItemLimit-retrysafe.CheckpointStoreLimit {
		// The checkpoint the record may hold is not known here; a
		// response that leaves no room for the largest one is refused
		// before it is sent, and DynamoDB refuses the rest.
		return fmt.Errorf("%w: complete: the response takes %d bytes, the store keeps at most %d (MaxResponseBody)", ErrItemTooLarge, len(header)+len(body), MaxResponseBody)
	}
	values := fenceValues(p.Token)
	values[":c"] = strAttr(stateCompleted)
	values[":now"] = timeAttr(p.Now)
	expires := p.Now.Add(p.TTL)
	values[":ex"] = timeAttr(expires)
	values[":ttl"] = ttlSeconds(expires.Add(s.expired))
	values[":rs"] = numAttr(int64(status))
	set := "SET st = :c, ua = :now, ex = :ex, #ttl = :ttl, rs = :rs"
	remove := " REMOVE ab"
	if header != nil {
		set += ", rh = :rh"
		values[":rh"] = binAttr(header)
	} else {
		remove += ", rh"
	}
	if len(body) > 0 {
		set += ", rb = :rb"
		values[":rb"] = binAttr(body)
	} else {
		remove += ", rb"
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.table,
		Key:                                 keyOf(p.Scope, p.Key),
		UpdateExpression:                    aws.String(set + remove),
		ConditionExpression:                 aws.String(fenced),
		ExpressionAttributeNames:            map[string]string{"#ttl": TTLAttribute},
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, failed := conditionFailed(err); failed {
		if old == nil {
			// A server that does not return ALL_OLD: read the record.
			if old, err = s.getItem(ctx, "complete", p.Scope, p.Key, false); err != nil {
				return err
			}
		}
		if ownCompletion(old, p) {
			return nil // our own write, retried by the SDK after its answer was lost
		}
		return retrysafe.ErrLeaseLost
	}
	return translate("complete", err)
}

// ownCompletion reports whether old is the record p's Complete wrote: the
// same token, completed at the same time.
func ownCompletion(old map[string]types.AttributeValue, p *retrysafe.CompleteParams) bool {
	if old == nil {
		return false
	}
	d := decoder{item: old}
	return d.str(attrState) == stateCompleted && d.str(attrToken) == p.Token && d.num(attrUpdated) == p.Now.UnixNano() && d.err == nil
}

// Release implements [retrysafe.Store]: one DeleteItem conditional on the
// owner's token.
func (s *Store) Release(ctx context.Context, p *retrysafe.ReleaseParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.Token == "" {
		return retrysafe.ErrLeaseLost // no record has an empty token
	}
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 s.table,
		Key:                       keyOf(p.Scope, p.Key),
		ConditionExpression:       aws.String(fenced),
		ExpressionAttributeValues: fenceValues(p.Token),
	})
	if _, failed := conditionFailed(err); failed {
		return retrysafe.ErrLeaseLost
	}
	return translate("release", err)
}
