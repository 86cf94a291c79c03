package adaptertest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/internal/testenv"
)

// HTTPClient is the Client of an HTTP adapter: it POSTs each call to URL
// with Client (nil: a client of its own), the key in Idempotency-Key and
// the tenant as "Authorization: Bearer <tenant>", and reads the answer as
// the middleware's behaviour table says: the handler's 201 is KindAnswer
// (its MetaHeader and Idempotent-Replayed read), 400 KindBadKey, 422
// KindMismatch, 409 KindInProgress.
type HTTPClient struct {
	URL    string
	Client *http.Client
}

// Send implements Client.
func (c *HTTPClient) Send(ctx context.Context, call Call) (Reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(call.Body))
	if err != nil {
		return Reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if call.Key != "" {
		req.Header.Set(retrysafe.HeaderKey, call.Key)
	}
	if call.Tenant != "" {
		req.Header.Set("Authorization", "Bearer "+call.Tenant)
	}
	hc := c.Client
	if hc == nil {
		hc = testenv.HTTPClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, err
	}
	r := Reply{Detail: fmt.Sprintf("HTTP %d %s: %.200q", resp.StatusCode, resp.Header.Get("Content-Type"), body)}
	switch resp.StatusCode {
	case http.StatusCreated:
		r.Kind, r.Body, r.Meta = KindAnswer, body, resp.Header.Get(MetaHeader)
		r.Replayed = resp.Header.Get(retrysafe.HeaderReplayed) == "true"
	case http.StatusBadRequest:
		if problemOf(resp, body, retrysafe.ProblemMissingKey, retrysafe.ProblemInvalidKey) {
			r.Kind = KindBadKey
		}
	case http.StatusUnprocessableEntity:
		if problemOf(resp, body, retrysafe.ProblemMismatch) {
			r.Kind = KindMismatch
		}
	case http.StatusConflict:
		if problemOf(resp, body, retrysafe.ProblemInProgress) && resp.Header.Get("Retry-After") != "" {
			r.Kind = KindInProgress
		}
	}
	return r, nil
}

// problemOf reports whether resp is a problem+json answer of one of the
// types slugs.
func problemOf(resp *http.Response, body []byte, slugs ...string) bool {
	if resp.Header.Get("Content-Type") != retrysafe.ContentTypeProblem {
		return false
	}
	for _, s := range slugs {
		if bytes.Contains(body, []byte(`"type":"`+retrysafe.DefaultProblemBase+s+`"`)) {
			return true
		}
	}
	return false
}

// HTTPHandler is h as a net/http handler: it reads the body, calls h with
// the request's context, and answers 201 with the Answer's body and its
// Meta in MetaHeader.
func HTTPHandler(h Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a := h(r.Context(), body)
		w.Header().Set(MetaHeader, a.Meta)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(a.Body)
	})
}

// BearerTenant returns the tenant of an "Authorization: Bearer <tenant>"
// value, as HTTPClient sends it; "" for anything else.
func BearerTenant(authorization string) string {
	t, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok {
		return ""
	}
	return t
}
