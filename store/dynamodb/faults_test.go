package dynamodb_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
	rsdynamodb "github.com/retrysafe/retrysafe/store/dynamodb"
	"github.com/retrysafe/retrysafe/store/storetest"
)

// What dynalite does not emulate (throttling, Time to Live deletion,
// global tables, some error answers) is tested here with a transport
// between the SDK and dynalite that answers or rewrites chosen calls.

// faultTransport sends requests to dynalite unless fault, given the
// DynamoDB operation (X-Amz-Target's suffix) and the number of the call
// of that operation (from 1), answers instead.
type faultTransport struct {
	calls atomic.Int64
	fault func(op string, n int64, req *http.Request) (*http.Response, error)
}

func (f *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	n := f.calls.Add(1)
	if f.fault != nil {
		if resp, err := f.fault(op, n, req); resp != nil || err != nil {
			return resp, err
		}
	}
	return testenv.HTTPClient.Transport.RoundTrip(req)
}

// apiError is DynamoDB's JSON answer for an error of the given type.
func apiError(req *http.Request, status int, typ, msg string) *http.Response {
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#` + typ + `","message":"` + msg + `"}`
	return &http.Response{
		StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status),
		Header:  http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Requestid": {"fault"}},
		Body:    io.NopCloser(strings.NewReader(body)),
		Request: req, ProtoMajor: 1, ProtoMinor: 1,
	}
}

func claimParams(key string) *retrysafe.ClaimParams {
	return &retrysafe.ClaimParams{Scope: "s", Key: key, Fingerprint: "fp", Token: retrysafe.NewToken(), Now: storetest.Base, Lease: 30 * time.Second}
}

// TestThrottledClaimIsNotClaimed: a claim that DynamoDB throttles every
// time (ProvisionedThroughputExceededException, ThrottlingException) is
// retried by the SDK and then reported as ErrStoreUnavailable, never as
// claimed, and leaves no record.
func TestThrottledClaimIsNotClaimed(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	for _, typ := range []string{"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded", "InternalServerError"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			var puts atomic.Int64
			ft := &faultTransport{fault: func(op string, _ int64, req *http.Request) (*http.Response, error) {
				if op == "PutItem" {
					puts.Add(1)
					status := http.StatusBadRequest
					if typ == "InternalServerError" {
						status = http.StatusInternalServerError
					}
					return apiError(req, status, typ, "injected"), nil
				}
				return nil, nil
			}}
			s, err := rsdynamodb.New(newClient(t, endpoint(), ft, func(o *dynamodb.Options) { o.RetryMaxAttempts = 3 }), rsdynamodb.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			p := claimParams("throttled-" + typ)
			res, err := s.Claim(t.Context(), p)
			if !errors.Is(err, retrysafe.ErrStoreUnavailable) || res != nil {
				t.Fatalf("throttled Claim: %+v, %v; want ErrStoreUnavailable and no result", res, err)
			}
			if puts.Load() != 3 {
				t.Errorf("the SDK sent %d PutItem calls, want 3 (its retries of a throttled call)", puts.Load())
			}
			if _, err := newStoreOn(t, table, nil).Get(t.Context(), &retrysafe.GetParams{Scope: "s", Key: p.Key, Now: storetest.Base}); !errors.Is(err, retrysafe.ErrNotFound) {
				t.Fatalf("after a throttled claim, Get: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestLostAnswerRetried: a write that reached DynamoDB but whose answer was
// lost (the connection reset after the request was sent) is retried by
// the SDK; the retry's failed condition shows the caller's own token, so
// Claim reports the claim, Complete succeeds and Extend keeps working.
func TestLostAnswerRetried(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	var lose atomic.Value // the operation whose next answer is lost
	lose.Store("")
	var lost atomic.Int64
	ft := &faultTransport{fault: func(op string, _ int64, req *http.Request) (*http.Response, error) {
		if op != lose.Load().(string) {
			return nil, nil
		}
		lose.Store("")
		resp, err := testenv.HTTPClient.Transport.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lost.Add(1)
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}}
	s := newStoreOn(t, table, ft)
	p := claimParams("lost")
	lose.Store("PutItem")
	res, err := s.Claim(t.Context(), p)
	if err != nil || !res.Claimed || res.Record.Token != p.Token {
		t.Fatalf("Claim whose first answer was lost: %+v, %v; want Claimed with the caller's token", res, err)
	}
	lose.Store("UpdateItem")
	if err := s.Extend(t.Context(), &retrysafe.ExtendParams{Scope: "s", Key: "lost", Token: p.Token, Now: storetest.Base.Add(time.Second), Lease: time.Minute}); err != nil {
		t.Fatalf("Extend whose first answer was lost: %v", err)
	}
	lose.Store("UpdateItem")
	resp := &retrysafe.Response{Status: 201, Body: []byte("done")}
	if err := s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: "s", Key: "lost", Token: p.Token, Now: storetest.Base.Add(2 * time.Second), TTL: time.Hour, Response: resp}); err != nil {
		t.Fatalf("Complete whose first answer was lost: %v", err)
	}
	if lost.Load() != 3 {
		t.Fatalf("%d answers lost, want 3", lost.Load())
	}
	rec, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: "s", Key: "lost", Now: storetest.Base.Add(2 * time.Second)})
	if err != nil || rec.State != retrysafe.StateCompleted || string(rec.Response.Body) != "done" || rec.Attempt != 1 {
		t.Fatalf("after the retried writes: %+v, %v", rec, err)
	}
	// A second Complete by the same owner, later, is fenced as always.
	err = s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: "s", Key: "lost", Token: p.Token, Now: storetest.Base.Add(3 * time.Second), TTL: time.Hour, Response: resp})
	if !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("a second Complete: %v, want ErrLeaseLost", err)
	}
}

// TestWithoutAllOld: a server that does not return the item of a failed
// condition (DynamoDB Local before 2023, other emulators) still gets the
// blocking record back, through a strongly consistent read.
func TestWithoutAllOld(t *testing.T) {
	t.Parallel()
	var stripped atomic.Int64
	ft := &faultTransport{fault: func(op string, _ int64, req *http.Request) (*http.Response, error) {
		if op != "PutItem" {
			return nil, nil
		}
		resp, err := testenv.HTTPClient.Transport.RoundTrip(req)
		if err != nil || resp.StatusCode == http.StatusOK {
			return resp, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		if json.Unmarshal(body, &m) == nil {
			if _, ok := m["Item"]; ok {
				stripped.Add(1)
			}
			delete(m, "Item")
			body, _ = json.Marshal(m)
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		resp.Header.Del("X-Amz-Crc32")
		return resp, nil
	}}
	s := newStoreOn(t, newTable(t), ft)
	first := claimParams("k")
	if res, err := s.Claim(t.Context(), first); err != nil || !res.Claimed {
		t.Fatalf("first Claim: %+v, %v", res, err)
	}
	res, err := s.Claim(t.Context(), claimParams("k"))
	if err != nil || res.Claimed || res.Record.Token != first.Token {
		t.Fatalf("duplicate Claim without ALL_OLD: %+v, %v; want the first claim's record", res, err)
	}
	t.Logf("ALL_OLD items stripped: %d (dynalite sends none)", stripped.Load())
}

// TestAllOldOneRoundTrip: against a server that returns the item of a
// failed condition, as DynamoDB does (dynalite does not: the transport
// adds it here, read just after the failure), a duplicate claim costs
// one call, the PutItem, with no read.
func TestAllOldOneRoundTrip(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	raw := newClient(t, endpoint(), nil)
	var gets, puts atomic.Int64
	ft := &faultTransport{fault: func(op string, _ int64, req *http.Request) (*http.Response, error) {
		switch op {
		case "GetItem":
			gets.Add(1)
			return nil, nil
		case "PutItem":
			puts.Add(1)
		default:
			return nil, nil
		}
		reqBody, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
		resp, err := testenv.HTTPClient.Transport.RoundTrip(req)
		if err != nil || resp.StatusCode == http.StatusOK {
			return resp, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil || !strings.HasSuffix(m["__type"].(string), "ConditionalCheckFailedException") {
			t.Errorf("PutItem failed with %s", body)
		}
		var in struct {
			Item map[string]map[string]any
		}
		_ = json.Unmarshal(reqBody, &in)
		pk, _ := in.Item["pk"]["B"].(string)
		key, _ := base64.StdEncoding.DecodeString(pk)
		out, err := raw.GetItem(req.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberB{Value: key}}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, err
		}
		m["Item"] = wireItem(out.Item)
		body, _ = json.Marshal(m)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		resp.Header.Del("X-Amz-Crc32")
		return resp, nil
	}}
	s := newStoreOn(t, table, ft)
	first := claimParams("k")
	if res, err := s.Claim(t.Context(), first); err != nil || !res.Claimed {
		t.Fatalf("first Claim: %+v, %v", res, err)
	}
	gets.Store(0)
	puts.Store(0)
	res, err := s.Claim(t.Context(), claimParams("k"))
	if err != nil || res.Claimed || res.Record.Token != first.Token || res.Record.Fingerprint != first.Fingerprint {
		t.Fatalf("duplicate Claim: %+v, %v; want the first claim's record", res, err)
	}
	if gets.Load() != 0 || puts.Load() != 1 {
		t.Fatalf("duplicate Claim made %d PutItem and %d GetItem calls, want 1 and 0", puts.Load(), gets.Load())
	}
}

// wireItem is item in DynamoDB's JSON wire form (the types the store writes).
func wireItem(item map[string]types.AttributeValue) map[string]any {
	m := make(map[string]any, len(item))
	for name, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			m[name] = map[string]any{"S": v.Value}
		case *types.AttributeValueMemberN:
			m[name] = map[string]any{"N": v.Value}
		case *types.AttributeValueMemberB:
			m[name] = map[string]any{"B": base64.StdEncoding.EncodeToString(v.Value)}
		case *types.AttributeValueMemberBOOL:
			m[name] = map[string]any{"BOOL": v.Value}
		}
	}
	return m
}

// TestTTLDeletion: DynamoDB's Time to Live deletes a record on its own
// some time after the TTL attribute (dynalite never does). The attribute
// is set past the logical expiry, and a record deleted under its owner
// fences it and counts as absent.
func TestTTLDeletion(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	s := newStoreOn(t, table, nil)
	raw := newClient(t, endpoint(), nil)
	p := claimParams("ttl")
	if _, err := s.Claim(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	ttlOf := func() int64 {
		t.Helper()
		out, err := raw.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: rawKey("s", "ttl"), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		n, ok := out.Item[rsdynamodb.TTLAttribute].(*types.AttributeValueMemberN)
		if !ok {
			t.Fatalf("item without its %s attribute: %v", rsdynamodb.TTLAttribute, out.Item)
		}
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v
	}
	leaseUntil := p.Now.Add(p.Lease)
	if got, want := ttlOf(), leaseUntil.Add(rsdynamodb.DefaultProcessingRetention).Unix(); got <= want {
		t.Fatalf("processing record's TTL %d, want after lease end + retention %d", got, want)
	}
	done := p.Now.Add(time.Second)
	if err := s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: "s", Key: "ttl", Token: p.Token, Now: done, TTL: time.Hour, Response: &retrysafe.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	if got, want := ttlOf(), done.Add(time.Hour).Unix(); got <= want {
		t.Fatalf("completed record's TTL %d, want after ExpiresAt %d", got, want)
	}
	// Expiry holds on read before TTL deletes anything.
	if _, err := s.Get(t.Context(), &retrysafe.GetParams{Scope: "s", Key: "ttl", Now: done.Add(time.Hour)}); !errors.Is(err, retrysafe.ErrNotFound) {
		t.Fatalf("Get at ExpiresAt: %v, want ErrNotFound", err)
	}
	// A processing record that TTL deleted under its owner.
	q := claimParams("gone")
	if _, err := s.Claim(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: rawKey("s", "gone")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(t.Context(), &retrysafe.ExtendParams{Scope: "s", Key: "gone", Token: q.Token, Now: q.Now, Lease: time.Minute}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Extend of a record TTL deleted: %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: "s", Key: "gone", Token: q.Token, Now: q.Now, TTL: time.Hour, Response: &retrysafe.Response{Status: 200}}); !errors.Is(err, retrysafe.ErrLeaseLost) {
		t.Fatalf("Complete of a record TTL deleted: %v, want ErrLeaseLost", err)
	}
	if res, err := s.Claim(t.Context(), claimParams("gone")); err != nil || !res.Claimed || res.Record.Attempt != 1 {
		t.Fatalf("Claim after TTL deletion: %+v, %v; want a new record", res, err)
	}
}

// rawKey is the store's partition key for scope and key (doc.go: the
// scope's length as a uvarint, the scope, the key).
func rawKey(scope, key string) map[string]types.AttributeValue {
	pk := append([]byte{byte(len(scope))}, scope...)
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberB{Value: append(pk, key...)}}
}

// TestGlobalTableWarning: a table with replicas in other regions (a
// global table, which dynalite does not have) gets a durability warning;
// one without gets none.
func TestGlobalTableWarning(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	if w, err := newStoreOn(t, table, nil).CheckDurability(t.Context()); err != nil || len(w) != 0 {
		t.Fatalf("CheckDurability of a one-region table: %v, %v; want none", w, err)
	}
	ft := &faultTransport{fault: func(op string, _ int64, req *http.Request) (*http.Response, error) {
		if op != "DescribeTable" {
			return nil, nil
		}
		body := `{"Table":{"TableName":"` + table + `","TableStatus":"ACTIVE","Replicas":[{"RegionName":"eu-west-1","ReplicaStatus":"ACTIVE"},{"RegionName":"us-west-2","ReplicaStatus":"ACTIVE"}]}}`
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
	}}
	w, err := newStoreOn(t, table, ft).CheckDurability(t.Context())
	if err != nil || len(w) != 1 || w[0].Setting != "global_table_replicas" || w[0].Value != "eu-west-1,us-west-2" {
		t.Fatalf("CheckDurability of a global table: %+v, %v", w, err)
	}
}

// TestItemTooLarge: a response over the item limit is refused before it
// is sent, and DynamoDB's own refusal of an oversized item maps to the
// same error; neither is ErrStoreUnavailable, and the record stays
// processing.
func TestItemTooLarge(t *testing.T) {
	t.Parallel()
	table := newTable(t)
	refuse := atomic.Bool{}
	ft := &faultTransport{fault: func(op string, _ int64, req *http.Request) (*http.Response, error) {
		if op == "UpdateItem" && refuse.Load() {
			return apiError(req, 400, "ValidationException", "Item size has exceeded the maximum allowed size"), nil
		}
		return nil, nil
	}}
	s := newStoreOn(t, table, ft)
	p := claimParams("big")
	if _, err := s.Claim(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	complete := func(n int) error {
		return s.Complete(t.Context(), &retrysafe.CompleteParams{Scope: "s", Key: "big", Token: p.Token, Now: p.Now, TTL: time.Hour, Response: &retrysafe.Response{Status: 200, Body: make([]byte, n)}})
	}
	if err := complete(rsdynamodb.ItemLimit); !errors.Is(err, rsdynamodb.ErrItemTooLarge) || errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Complete with a body of the item limit: %v, want ErrItemTooLarge", err)
	}
	refuse.Store(true)
	if err := complete(10); !errors.Is(err, rsdynamodb.ErrItemTooLarge) || errors.Is(err, retrysafe.ErrStoreUnavailable) {
		t.Fatalf("Complete that DynamoDB refuses as too large: %v, want ErrItemTooLarge", err)
	}
	refuse.Store(false)
	if err := complete(rsdynamodb.MaxResponseBody); err != nil {
		t.Fatalf("Complete with a body of MaxResponseBody: %v", err)
	}
}
