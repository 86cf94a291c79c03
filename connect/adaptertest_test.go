package retrysafeconnect_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/retrysafe/retrysafe"
	retrysafeconnect "github.com/retrysafe/retrysafe/connect"
	"github.com/retrysafe/retrysafe/internal/adaptertest"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The shared black-box suite through a Connect handler: the middleware in
// front, retrysafeconnect.Errors around it, a Connect client (body a
// google.protobuf.BytesValue, Meta a response header) reading Connect
// errors by code and ErrorInfo reason.
func TestAdapterSuite(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, suiteAdapter{})
}

const suiteProc = "/retrysafe.adaptertest.Suite/Call"

type suiteAdapter struct{}

func (suiteAdapter) Start(t *testing.T, cfg retrysafe.Config, h adaptertest.Handler) adaptertest.Client {
	mw, err := retrysafe.NewMiddleware(cfg) // scope: the Authorization header, the middleware's default
	if err != nil {
		t.Fatal(err)
	}
	handler := connect.NewUnaryHandler(suiteProc, func(ctx context.Context, req *connect.Request[wrapperspb.BytesValue]) (*connect.Response[wrapperspb.BytesValue], error) {
		a := h(ctx, req.Msg.GetValue())
		resp := connect.NewResponse(wrapperspb.Bytes(a.Body))
		resp.Header().Set(adaptertest.MetaHeader, a.Meta)
		return resp, nil
	})
	mux := http.NewServeMux()
	mux.Handle(suiteProc, retrysafeconnect.Errors(mw(handler)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return suiteClient{connect.NewClient[wrapperspb.BytesValue, wrapperspb.BytesValue](srv.Client(), srv.URL+suiteProc)}
}

type suiteClient struct {
	c *connect.Client[wrapperspb.BytesValue, wrapperspb.BytesValue]
}

func (c suiteClient) Send(ctx context.Context, call adaptertest.Call) (adaptertest.Reply, error) {
	req := connect.NewRequest(wrapperspb.Bytes(call.Body))
	if call.Key != "" {
		req.Header().Set(retrysafe.HeaderKey, call.Key)
	}
	if call.Tenant != "" {
		req.Header().Set("Authorization", "Bearer "+call.Tenant)
	}
	resp, err := c.c.CallUnary(ctx, req)
	if err == nil {
		return adaptertest.Reply{Kind: adaptertest.KindAnswer, Body: resp.Msg.GetValue(), Meta: resp.Header().Get(adaptertest.MetaHeader),
			Replayed: resp.Header().Get(retrysafe.HeaderReplayed) == "true", Detail: "ok"}, nil
	}
	r := adaptertest.Reply{Detail: err.Error()}
	var ce *connect.Error
	if ctx.Err() != nil || !errors.As(err, &ce) || ce.Meta().Get("Content-Type") != "application/json" {
		return r, err // no Connect error read (the call was cut, say)
	}
	reason := ""
	retry := false
	for _, d := range ce.Details() {
		switch d.Type() {
		case "google.rpc.ErrorInfo":
			reason = reasonOfDetail(d.Bytes())
		case "google.rpc.RetryInfo":
			retry = true
		}
	}
	switch {
	case ce.Code() == connect.CodeInvalidArgument && (reason == "MISSING_KEY" || reason == "INVALID_KEY"):
		r.Kind = adaptertest.KindBadKey
	case ce.Code() == connect.CodeFailedPrecondition && reason == "KEY_REUSED":
		r.Kind = adaptertest.KindMismatch
	case ce.Code() == connect.CodeAborted && reason == "REQUEST_IN_PROGRESS" && retry:
		r.Kind = adaptertest.KindInProgress
	}
	return r, nil
}
