package dynamodb

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/retrysafe/retrysafe"
)

// claimRounds bounds how often Claim starts over when the record changed
// between its conditional writes (each time, another caller made
// progress: it claimed, completed, released or took the record over).
const claimRounds = 16

// Claim implements [retrysafe.Store].
//
// A new key, or one whose result has expired, costs one conditional
// PutItem; so does a duplicate, which gets the stored record back in the
// failed condition's ALL_OLD item. Taking over an expired lease costs a
// second write: an UpdateItem conditional on the token, fingerprint and
// lease the first call saw, which keeps the record's creation time,
// attempt count and checkpoint.
func (s *Store) Claim(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for range claimRounds {
		res, err := s.claimOnce(ctx, p)
		if err != nil || res != nil {
			return res, err
		}
	}
	return nil, retrysafe.Unavailable("claim", errors.New("the record kept changing under the claim"))
}

// claimOnce makes one round of Claim; nil, nil means start over.
func (s *Store) claimOnce(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	now := timeAttr(p.Now)
	leaseUntil := p.Now.Add(p.Lease)
	item := keyOf(p.Scope, p.Key)
	item[attrState] = strAttr(stateProcessing)
	item[attrToken] = strAttr(p.Token)
	item[attrAttempt] = numAttr(1)
	item[attrCreated] = now
	item[attrUpdated] = now
	item[attrLeaseUntil] = timeAttr(leaseUntil)
	item[TTLAttribute] = ttlSeconds(leaseUntil.Add(s.retention))
	if p.Fingerprint != "" {
		item[attrFingerprint] = strAttr(p.Fingerprint)
	}
	if p.Route != "" {
		item[attrRoute] = strAttr(p.Route)
	}
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           s.table,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk) OR (st = :c AND ex <= :now)"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":c": strAttr(stateCompleted), ":now": now},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return &retrysafe.ClaimResult{Claimed: true, Record: p.ProcessingRecord(1, p.Now, p.Now, leaseUntil)}, nil
	}
	old, failed := conditionFailed(err)
	if !failed {
		return nil, translate("claim", err)
	}
	if old == nil {
		// A server that does not return ALL_OLD: read the record.
		if old, err = s.getItem(ctx, "claim", p.Scope, p.Key, true); err != nil {
			return nil, err
		}
		if old == nil {
			return nil, nil // released meanwhile: start over
		}
	}
	rec, err := decodeItem(old, true)
	if err != nil {
		return nil, retrysafe.Unavailable("claim", err)
	}
	if rec.State == retrysafe.StateProcessing && rec.Token == p.Token {
		// Our own write, retried by the SDK after its answer was lost.
		return &retrysafe.ClaimResult{Claimed: true, Record: rec}, nil
	}
	if rec.Expired(p.Now) {
		return nil, nil // it expired between the write and the read
	}
	if !rec.LeaseExpired(p.Now) || rec.Fingerprint != p.Fingerprint || p.NoTakeover ||
		(p.TakeoverToken != "" && p.TakeoverToken != rec.Token) {
		return &retrysafe.ClaimResult{Record: rec}, nil
	}
	return s.takeOver(ctx, p, rec)
}

// takeOver replaces the owner of rec, a processing record whose lease ran
// out, if it is still as read; nil, nil means start over.
func (s *Store) takeOver(ctx context.Context, p *retrysafe.ClaimParams, rec *retrysafe.Record) (*retrysafe.ClaimResult, error) {
	leaseUntil := p.Now.Add(p.Lease)
	set := "SET tok = :tok, att = att + :one, ua = :now, lu = :lu, #ttl = :ttl"
	values := map[string]types.AttributeValue{
		":tok": strAttr(p.Token), ":one": numAttr(1), ":now": timeAttr(p.Now), ":lu": timeAttr(leaseUntil),
		":ttl": ttlSeconds(leaseUntil.Add(s.retention)), ":old": strAttr(rec.Token), ":p": strAttr(stateProcessing),
	}
	remove := " REMOVE ab"
	if p.Route != "" {
		set += ", rt = :rt"
		values[":rt"] = strAttr(p.Route)
	} else {
		remove += ", rt"
	}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           s.table,
		Key:                                 keyOf(p.Scope, p.Key),
		UpdateExpression:                    aws.String(set + remove),
		ConditionExpression:                 aws.String("tok = :old AND st = :p AND lu <= :now"),
		ExpressionAttributeNames:            map[string]string{"#ttl": TTLAttribute},
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		if old, failed := conditionFailed(err); failed {
			if old != nil {
				if cur, derr := decodeItem(old, false); derr == nil && cur.State == retrysafe.StateProcessing && cur.Token == p.Token {
					// Our own takeover, retried by the SDK: read it back whole.
					return s.ownRecord(ctx, p)
				}
			}
			return nil, nil
		}
		return nil, translate("claim", err)
	}
	now, err := decodeItem(out.Attributes, true)
	if err != nil {
		return nil, retrysafe.Unavailable("claim", err)
	}
	return &retrysafe.ClaimResult{Claimed: true, Record: now}, nil
}

// ownRecord reads back the record a claim with p wrote.
func (s *Store) ownRecord(ctx context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	item, err := s.getItem(ctx, "claim", p.Scope, p.Key, true)
	if err != nil || item == nil {
		return nil, err
	}
	rec, err := decodeItem(item, true)
	if err != nil {
		return nil, retrysafe.Unavailable("claim", err)
	}
	if rec.State != retrysafe.StateProcessing || rec.Token != p.Token {
		return nil, nil
	}
	return &retrysafe.ClaimResult{Claimed: true, Record: rec}, nil
}

// getItem reads one item with a strongly consistent read; nil when absent.
func (s *Store) getItem(ctx context.Context, op, scope, key string, withBody bool) (map[string]types.AttributeValue, error) {
	in := &dynamodb.GetItemInput{TableName: s.table, Key: keyOf(scope, key), ConsistentRead: aws.Bool(true)}
	if !withBody {
		in.ProjectionExpression = aws.String(projectionNoBody)
		in.ExpressionAttributeNames = map[string]string{"#ttl": TTLAttribute}
	}
	out, err := s.client.GetItem(ctx, in)
	if err != nil {
		return nil, translate(op, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// projectionNoBody reads every attribute but the response body.
const projectionNoBody = "pk, st, tok, fp, rt, att, ca, ua, lu, ex, ab, cpn, cpd, cpa, rs, rh, #ttl"
