package dynamodb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/headercodec"
)

// The attributes of an item (one record). Names are short because
// DynamoDB counts them in every item's size and in every write's cost.
const (
	attrPK          = "pk"  // B: uvarint(len(scope)) || scope || key
	attrState       = "st"  // S: "p" (processing) or "c" (completed)
	attrToken       = "tok" // S
	attrFingerprint = "fp"  // S, absent when empty
	attrRoute       = "rt"  // S, absent when empty
	attrAttempt     = "att" // N
	attrCreated     = "ca"  // N: Unix nanoseconds
	attrUpdated     = "ua"  // N: Unix nanoseconds
	attrLeaseUntil  = "lu"  // N: Unix nanoseconds
	attrExpiresAt   = "ex"  // N: Unix nanoseconds (completed)
	attrAbandoned   = "ab"  // BOOL, absent unless true
	attrCPName      = "cpn" // S
	attrCPData      = "cpd" // B, absent when empty
	attrCPAt        = "cpa" // N: Unix nanoseconds
	attrStatus      = "rs"  // N (completed)
	attrHeader      = "rh"  // B: internal/headercodec (completed)
	attrBody        = "rb"  // B, absent when empty (completed)
	// TTLAttribute is the attribute DynamoDB's Time to Live reads (Unix
	// seconds): the table's TTL setting must name it. It is a backstop
	// that reclaims space well after a record's logical expiry; expiry
	// itself is decided on every read from the caller's time.
	TTLAttribute = "ttl"
)

const (
	stateProcessing = "p"
	stateCompleted  = "c"
)

// partitionKey joins scope and key without ambiguity: the scope's length
// comes first, so ("ab","c") and ("a","bc") differ.
func partitionKey(scope, key string) []byte {
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(scope)+len(key)), uint64(len(scope)))
	b = append(b, scope...)
	return append(b, key...)
}

func splitPartitionKey(pk []byte) (scope, key string, err error) {
	n, w := binary.Uvarint(pk)
	if w <= 0 || uint64(len(pk)-w) < n {
		return "", "", errors.New("malformed partition key")
	}
	return string(pk[w : w+int(n)]), string(pk[w+int(n):]), nil
}

func keyOf(scope, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberB{Value: partitionKey(scope, key)}}
}

func numAttr(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func timeAttr(t time.Time) types.AttributeValue { return numAttr(t.UnixNano()) }

func strAttr(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func binAttr(b []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: b} }

// ttlSeconds is the value of the TTL attribute for a record that may be
// deleted at t: DynamoDB deletes items some time after it (within days).
func ttlSeconds(t time.Time) types.AttributeValue { return numAttr(t.Unix() + 1) }

// decodeItem turns an item into a record. withBody false leaves the
// response body out.
func decodeItem(item map[string]types.AttributeValue, withBody bool) (*retrysafe.Record, error) {
	pk, ok := item[attrPK].(*types.AttributeValueMemberB)
	if !ok {
		return nil, errors.New("item without a binary partition key")
	}
	scope, key, err := splitPartitionKey(pk.Value)
	if err != nil {
		return nil, err
	}
	d := decoder{item: item}
	rec := &retrysafe.Record{
		Scope:       scope,
		Key:         key,
		Fingerprint: d.str(attrFingerprint),
		Token:       d.str(attrToken),
		Route:       d.str(attrRoute),
		Attempt:     int(d.num(attrAttempt)),
		CreatedAt:   d.time(attrCreated),
		UpdatedAt:   d.time(attrUpdated),
		LeaseUntil:  d.time(attrLeaseUntil),
	}
	if v, ok := item[attrAbandoned].(*types.AttributeValueMemberBOOL); ok {
		rec.Abandoned = v.Value
	}
	if _, ok := item[attrCPName]; ok {
		rec.Checkpoint = &retrysafe.Checkpoint{Name: d.str(attrCPName), Data: d.bin(attrCPData), At: d.time(attrCPAt)}
		if rec.Checkpoint.Data == nil {
			rec.Checkpoint.Data = []byte{}
		}
	}
	switch st := d.str(attrState); st {
	case stateProcessing:
		rec.State = retrysafe.StateProcessing
	case stateCompleted:
		rec.State = retrysafe.StateCompleted
		rec.ExpiresAt = d.time(attrExpiresAt)
		rec.Response = &retrysafe.Response{Status: int(d.num(attrStatus))}
		if rec.Response.Header, err = headercodec.Decode(d.bin(attrHeader)); err != nil {
			return nil, fmt.Errorf("headers: %w", err)
		}
		if withBody {
			rec.Response.Body = d.bin(attrBody)
		}
	default:
		return nil, fmt.Errorf("unknown state %q", st)
	}
	if d.err != nil {
		return nil, d.err
	}
	return rec, nil
}

// decoder reads typed attributes, keeping the first error.
type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) str(name string) string {
	switch v := d.item[name].(type) {
	case nil:
		return ""
	case *types.AttributeValueMemberS:
		return v.Value
	}
	d.fail(name)
	return ""
}

func (d *decoder) bin(name string) []byte {
	switch v := d.item[name].(type) {
	case nil:
		return nil
	case *types.AttributeValueMemberB:
		return v.Value
	}
	d.fail(name)
	return nil
}

func (d *decoder) num(name string) int64 {
	v, ok := d.item[name].(*types.AttributeValueMemberN)
	if !ok {
		if d.item[name] != nil {
			d.fail(name)
		}
		return 0
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		d.fail(name)
	}
	return n
}

func (d *decoder) time(name string) time.Time {
	if d.item[name] == nil {
		return time.Time{}
	}
	return time.Unix(0, d.num(name)).UTC()
}

func (d *decoder) fail(name string) {
	if d.err == nil {
		d.err = fmt.Errorf("attribute %s has an unexpected type", name)
	}
}
