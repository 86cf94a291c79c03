package retrysafeotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/scopehash"
	retrysafeotel "github.com/retrysafe/retrysafe/otel"
	"github.com/retrysafe/retrysafe/store/memory"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// secretKey is the idempotency key of the tests: no span may carry it.
const secretKey = "secret-key-7f3a9c"

func newRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

func newStore(t *testing.T) retrysafe.Store {
	t.Helper()
	s := memory.New(memory.Config{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// byName returns the ended spans called name.
func byName(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	found := byName(spans, name)
	if len(found) != 1 {
		t.Fatalf("%d spans named %s, want 1; spans: %s", len(found), name, names(spans))
	}
	return found[0]
}

func names(spans []sdktrace.ReadOnlySpan) string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name())
	}
	return strings.Join(n, ",")
}

// checkNoSecret fails t if any span's name, attribute, event, status or
// link mentions any of secrets.
func checkNoSecret(t *testing.T, spans []sdktrace.ReadOnlySpan, secrets ...string) {
	t.Helper()
	if len(spans) == 0 {
		t.Fatal("no spans to check")
	}
	for _, s := range spans {
		texts := []string{s.Name(), s.Status().Description}
		for _, kv := range s.Attributes() {
			texts = append(texts, string(kv.Key), kv.Value.Emit())
		}
		for _, ev := range s.Events() {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.Emit())
			}
		}
		for _, l := range s.Links() {
			for _, kv := range l.Attributes {
				texts = append(texts, kv.Value.Emit())
			}
		}
		for _, text := range texts {
			for _, secret := range secrets {
				if strings.Contains(text, secret) {
					t.Errorf("span %s carries %q: %q", s.Name(), secret, text)
				}
			}
		}
	}
}

// clientParent is the span of a client that called the service.
func clientParent(t *testing.T) trace.SpanContext {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
}

// TestRequestSpans checks the spans of a new request and of its replay:
// the request span continues the client's traceparent, the store calls
// and the handler's own span are its children, the attributes say what
// happened, and no span carries the key.
func TestRequestSpans(t *testing.T) {
	t.Parallel()
	tp, sr := newRecorder(t)
	obs := retrysafeotel.NewObserver(retrysafeotel.Config{TracerProvider: tp, Store: "memory"})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newStore(t), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	app := tp.Tracer("app")
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, span := app.Start(r.Context(), "charge card")
		span.End()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"charged":true}`))
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client := clientParent(t)
	post := func() *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/orders/42", strings.NewReader(`{"amount":100}`))
		req.Header.Set(retrysafe.HeaderKey, secretKey)
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("traceparent", traceparent(client))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	if resp := post(); resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := sr.Ended()
	req := one(t, spans, retrysafeotel.SpanRequest)
	if p := req.Parent(); p.TraceID() != client.TraceID() || p.SpanID() != client.SpanID() || !p.IsRemote() {
		t.Errorf("request span's parent %s/%s (remote %v), want the client's %s/%s",
			p.TraceID(), p.SpanID(), p.IsRemote(), client.TraceID(), client.SpanID())
	}
	keyHash := retrysafeotel.KeyHash(scopehash.Sum("Bearer tok"), secretKey)
	want := map[attribute.Key]attribute.Value{
		retrysafeotel.AttrOutcome:  attribute.StringValue("new"),
		retrysafeotel.AttrReplayed: attribute.BoolValue(false),
		retrysafeotel.AttrAttempt:  attribute.IntValue(1),
		retrysafeotel.AttrStore:    attribute.StringValue("memory"),
		retrysafeotel.AttrKeyHash:  attribute.StringValue(keyHash),
		"http.request.method":      attribute.StringValue("POST"),
		"http.route":               attribute.StringValue("/orders/{id}"),
	}
	got := attrs(req)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("request span: %s = %s, want %s", k, got[k].Emit(), v.Emit())
		}
	}
	for _, name := range []string{"retrysafe.claim", "retrysafe.complete", "charge card"} {
		s := one(t, spans, name)
		if s.Parent().SpanID() != req.SpanContext().SpanID() || s.SpanContext().TraceID() != client.TraceID() {
			t.Errorf("span %s is not a child of the request span", name)
		}
	}
	claim := attrs(one(t, spans, "retrysafe.claim"))
	for k, v := range map[attribute.Key]attribute.Value{
		retrysafeotel.AttrClaimed:     attribute.BoolValue(true),
		retrysafeotel.AttrRecordState: attribute.StringValue("processing"),
		retrysafeotel.AttrAttempt:     attribute.IntValue(1),
		retrysafeotel.AttrResult:      attribute.StringValue("ok"),
		retrysafeotel.AttrOperation:   attribute.StringValue("claim"),
		retrysafeotel.AttrStore:       attribute.StringValue("memory"),
	} {
		if claim[k] != v {
			t.Errorf("claim span: %s = %s, want %s", k, claim[k].Emit(), v.Emit())
		}
	}
	if r := attrs(one(t, spans, "retrysafe.complete"))[retrysafeotel.AttrResult]; r.AsString() != "ok" {
		t.Errorf("complete span result %q", r.Emit())
	}

	// The retry: replayed, without running the handler.
	if resp := post(); resp.Header.Get(retrysafe.HeaderReplayed) != "true" {
		t.Fatalf("the retry was not replayed: %v", resp.Header)
	}
	spans = sr.Ended()
	reqs := byName(spans, retrysafeotel.SpanRequest)
	if len(reqs) != 2 {
		t.Fatalf("%d request spans after the retry, want 2", len(reqs))
	}
	replay := attrs(reqs[1])
	if replay[retrysafeotel.AttrReplayed] != attribute.BoolValue(true) || replay[retrysafeotel.AttrOutcome].AsString() != "replayed" ||
		replay[retrysafeotel.AttrKeyHash].AsString() != keyHash || replay[retrysafeotel.AttrAttempt] != attribute.IntValue(1) {
		t.Errorf("replay span attributes %v", reqs[1].Attributes())
	}
	claims := byName(spans, "retrysafe.claim")
	if c := attrs(claims[len(claims)-1]); c[retrysafeotel.AttrClaimed] != attribute.BoolValue(false) || c[retrysafeotel.AttrRecordState].AsString() != "completed" {
		t.Errorf("the replay's claim span: %v", claims[len(claims)-1].Attributes())
	}
	if n := len(byName(spans, "charge card")); n != 1 {
		t.Errorf("the handler ran %d times", n)
	}
	checkNoSecret(t, spans, secretKey, "Bearer tok", scopehash.Sum("Bearer tok"), `"amount"`, `"charged"`)
}

// failingStore fails every claim with an error whose message quotes the
// key, as a database error might.
type failingStore struct{ retrysafe.Store }

func (failingStore) Claim(_ context.Context, p *retrysafe.ClaimParams) (*retrysafe.ClaimResult, error) {
	return nil, retrysafe.Unavailable("claim", fmt.Errorf("duplicate key (key)=(%s) violates constraint", p.Key))
}

// TestStoreErrorSpan checks that a failed store call marks its span and
// the request span failed, with a class of error and without its message.
func TestStoreErrorSpan(t *testing.T) {
	t.Parallel()
	tp, sr := newRecorder(t)
	obs := retrysafeotel.NewObserver(retrysafeotel.Config{TracerProvider: tp, Store: "postgres"})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: failingStore{newStore(t)}, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran") }))
	req := httptest.NewRequest("POST", "/pay", strings.NewReader(`{}`))
	req.Header.Set(retrysafe.HeaderKey, secretKey)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
	spans := sr.Ended()
	claim := one(t, spans, "retrysafe.claim")
	if claim.Status().Code != codes.Error || attrs(claim)["error.type"].AsString() != "store_unavailable" ||
		attrs(claim)[retrysafeotel.AttrResult].AsString() != "error" || attrs(claim)["db.system.name"].AsString() != "postgresql" {
		t.Errorf("claim span: status %v, attributes %v", claim.Status(), claim.Attributes())
	}
	req2 := one(t, spans, retrysafeotel.SpanRequest)
	if req2.Status().Code != codes.Error || attrs(req2)[retrysafeotel.AttrOutcome].AsString() != "store_error" {
		t.Errorf("request span: status %v, attributes %v", req2.Status(), req2.Attributes())
	}
	if _, ok := attrs(req2)[retrysafeotel.AttrKeyHash]; ok {
		t.Error("a request whose claim failed has a key hash (the claim step reports the key only when it answered)")
	}
	checkNoSecret(t, spans, secretKey, "duplicate key")
}

// TestDoSpans checks a Do call's span: a child of the caller's span, the
// parent of its store calls and of the function's spans.
func TestDoSpans(t *testing.T) {
	t.Parallel()
	tp, sr := newRecorder(t)
	d, err := retrysafe.NewDoer(retrysafe.DoConfig{Store: newStore(t),
		Observer: retrysafeotel.NewObserver(retrysafeotel.Config{TracerProvider: tp, Store: "memory"})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, consumer := tp.Tracer("app").Start(context.Background(), "consume message")
	fn := func(ctx context.Context) (string, error) {
		_, span := tp.Tracer("app").Start(ctx, "send mail")
		span.End()
		return "sent", nil
	}
	for range 2 {
		if v, err := retrysafe.Run(ctx, d, secretKey, "fp", fn); v != "sent" || err != nil {
			t.Fatalf("Run: %q, %v", v, err)
		}
	}
	consumer.End()
	spans := sr.Ended()
	dos := byName(spans, retrysafeotel.SpanDo)
	if len(dos) != 2 {
		t.Fatalf("%d do spans, want 2: %s", len(dos), names(spans))
	}
	for i, want := range []string{"new", "replayed"} {
		a := attrs(dos[i])
		if a[retrysafeotel.AttrOutcome].AsString() != want || a[retrysafeotel.AttrReplayed].AsBool() != (want == "replayed") ||
			a[retrysafeotel.AttrAttempt] != attribute.IntValue(1) || a[retrysafeotel.AttrKeyHash].AsString() != retrysafeotel.KeyHash("", secretKey) {
			t.Errorf("do span %d: %v", i, dos[i].Attributes())
		}
		if dos[i].Parent().SpanID() != consumer.SpanContext().SpanID() {
			t.Errorf("do span %d is not a child of the caller's span", i)
		}
	}
	for _, name := range []string{"send mail", "retrysafe.complete"} {
		if s := one(t, spans, name); s.Parent().SpanID() != dos[0].SpanContext().SpanID() {
			t.Errorf("%s is not a child of the first do span", name)
		}
	}
	checkNoSecret(t, spans, secretKey)
}

// TestWaitSpan checks the span of a duplicate that waits for the
// original: retrysafe.wait, holding the gets it polled with, ending
// completed; the duplicate's request span says replayed.
func TestWaitSpan(t *testing.T) {
	t.Parallel()
	tp, sr := newRecorder(t)
	obs := retrysafeotel.NewObserver(retrysafeotel.Config{TracerProvider: tp})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newStore(t), Observer: obs, InFlight: retrysafe.InFlightWait})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	var wg sync.WaitGroup
	serve := func() {
		defer wg.Done()
		req := httptest.NewRequest("POST", "/pay", strings.NewReader(`{}`))
		req.Header.Set(retrysafe.HeaderKey, "k")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	wg.Add(2)
	go serve()
	<-started
	go serve()
	// Let the duplicate poll a few times before the original finishes.
	deadline := time.Now().Add(10 * time.Second)
	for len(byName(sr.Ended(), "retrysafe.get")) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	spans := sr.Ended()
	wait := one(t, spans, retrysafeotel.SpanWait)
	if a := attrs(wait); a[retrysafeotel.AttrResult].AsString() != "completed" || a[retrysafeotel.AttrAttempt] != attribute.IntValue(1) {
		t.Errorf("wait span: %v", wait.Attributes())
	}
	gets := byName(spans, "retrysafe.get")
	if len(gets) < 2 {
		t.Fatalf("%d get spans, want at least 2", len(gets))
	}
	for _, g := range gets {
		if g.Parent().SpanID() != wait.SpanContext().SpanID() {
			t.Error("a get span is not a child of the wait span")
		}
	}
	var replayed int
	for _, r := range byName(spans, retrysafeotel.SpanRequest) {
		if attrs(r)[retrysafeotel.AttrReplayed].AsBool() {
			replayed++
			if wait.Parent().SpanID() != r.SpanContext().SpanID() {
				t.Error("the wait span is not a child of the duplicate's request span")
			}
		}
	}
	if replayed != 1 {
		t.Errorf("%d replayed request spans, want 1", replayed)
	}
}

// TestEnrichActiveSpan checks that with EnrichActiveSpan the request's
// attributes go on the caller's span, the store spans are its children,
// and the Observer makes no request span of its own.
func TestEnrichActiveSpan(t *testing.T) {
	t.Parallel()
	tp, sr := newRecorder(t)
	obs := retrysafeotel.NewObserver(retrysafeotel.Config{TracerProvider: tp, Store: "sqlite", EnrichActiveSpan: true})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newStore(t), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	ctx, server := tp.Tracer("server").Start(context.Background(), "POST /pay", trace.WithSpanKind(trace.SpanKindServer))
	req := httptest.NewRequestWithContext(ctx, "POST", "/pay", strings.NewReader(`{}`))
	req.Header.Set(retrysafe.HeaderKey, secretKey)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if n := len(sr.Ended()); n != 2 {
		t.Fatalf("%d spans ended before the server span, want 2 (claim, complete): %s", n, names(sr.Ended()))
	}
	server.End()
	spans := sr.Ended()
	if n := len(byName(spans, retrysafeotel.SpanRequest)); n != 0 {
		t.Errorf("%d request spans of the Observer's own", n)
	}
	s := one(t, spans, "POST /pay")
	a := attrs(s)
	if a[retrysafeotel.AttrOutcome].AsString() != "new" || a[retrysafeotel.AttrStore].AsString() != "sqlite" || a[retrysafeotel.AttrAttempt] != attribute.IntValue(1) {
		t.Errorf("server span attributes %v", s.Attributes())
	}
	if c := one(t, spans, "retrysafe.claim"); c.Parent().SpanID() != s.SpanContext().SpanID() {
		t.Error("the claim span is not a child of the server span")
	}
	checkNoSecret(t, spans, secretKey)
}

// events records the Observer events passed on to Config.Next.
type events struct {
	mu       sync.Mutex
	outcomes []retrysafe.Outcome
	requests []retrysafe.Outcome
	stores   []string
	inFlight int
}

func (e *events) Outcome(o retrysafe.Outcome, _ time.Duration) {
	e.mu.Lock()
	e.outcomes = append(e.outcomes, o)
	e.mu.Unlock()
}
func (e *events) RequestOutcome(_ *http.Request, o retrysafe.Outcome, _ time.Duration) {
	e.mu.Lock()
	e.requests = append(e.requests, o)
	e.mu.Unlock()
}
func (e *events) StoreCall(op string, _ time.Duration, _ error) {
	e.mu.Lock()
	e.stores = append(e.stores, op)
	e.mu.Unlock()
}
func (e *events) InFlight(d int) {
	e.mu.Lock()
	e.inFlight += d
	e.mu.Unlock()
}

// TestNext checks that every event reaches Config.Next: a request's
// outcome through RequestOutcome, store calls, in-flight changes.
func TestNext(t *testing.T) {
	t.Parallel()
	tp, _ := newRecorder(t)
	next := &events{}
	obs := retrysafeotel.NewObserver(retrysafeotel.Config{TracerProvider: tp, Next: next})
	mw, err := retrysafe.NewMiddleware(retrysafe.Config{Store: newStore(t), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for range 2 {
		req := httptest.NewRequest("POST", "/pay", strings.NewReader(`{}`))
		req.Header.Set(retrysafe.HeaderKey, "k")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	next.mu.Lock()
	defer next.mu.Unlock()
	if fmt.Sprint(next.requests) != "[new replayed]" || len(next.outcomes) != 0 ||
		fmt.Sprint(next.stores) != "[claim complete claim]" || next.inFlight != 0 {
		t.Errorf("Next got requests %v, outcomes %v, store calls %v, in flight %d", next.requests, next.outcomes, next.stores, next.inFlight)
	}
}

// TestHelpers checks the exported attribute helpers.
func TestHelpers(t *testing.T) {
	t.Parallel()
	routes := map[string]string{
		"POST /orders/{id}":           "/orders/{id}",
		"/orders":                     "/orders",
		"POST example.com/orders/{$}": "/orders/{$}",
		"example.com/x":               "/x",
	}
	for pattern, want := range routes {
		if got := retrysafeotel.RoutePath(pattern); got != want {
			t.Errorf("RoutePath(%q) = %q, want %q", pattern, got, want)
		}
	}
	methods := map[string]string{"POST": "POST", "post": "POST", "PURGE": "_OTHER"}
	for m, want := range methods {
		kv := retrysafeotel.MethodAttrs(m)
		if kv[0].Value.AsString() != want || (m != want) != (len(kv) == 2) {
			t.Errorf("MethodAttrs(%q) = %v", m, kv)
		}
	}
	if a, b := retrysafeotel.KeyHash("s", "k"), retrysafeotel.KeyHash("s", "k2"); a == b || len(a) != 16 || retrysafeotel.KeyHash("sk", "") == retrysafeotel.KeyHash("s", "k") {
		t.Errorf("KeyHash: %q, %q", a, b)
	}
}
