// The demo's stories: each plays one failure against the gateway and
// checks what the client saw and what the upstream charged.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/gateway"
)

// A double click: two requests with one key, the second 20ms after the
// first, while the first is still being charged. The second waits for the
// first and gets its answer.
func demoDoubleClick(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{delay: 200 * time.Millisecond})
	answers := make([]demoAnswer, 2)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = d.payPatiently(ctx, key, order, 49900) })
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	for _, a := range answers {
		row.saw = append(row.saw, a.String())
	}
	row.expect(answers[0].status == http.StatusCreated && answers[1].status == http.StatusCreated, "want 201 for both clicks")
	row.expect(answers[0].replayed != answers[1].replayed, "want exactly one answer replayed")
	row.expect(answers[0].paymentID != "" && answers[0].paymentID == answers[1].paymentID, "want one payment ID for both clicks, got %q and %q", answers[0].paymentID, answers[1].paymentID)
}

// A response lost on the way back: the payments service charges, then
// takes a while to answer; the client's connection is cut right after the
// charge, so it never sees the answer. It retries with the same key at
// once: the retry waits for the original to finish and gets its stored
// answer.
func demoResponseLost(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{delay: demoSlow})
	first := d.payUntil(ctx, key, order, d.upstream.on(order, demoCharged))
	retry := d.payPatiently(ctx, key, order, 49900)
	saw := first.String()
	if first.err != nil {
		saw = "connection lost"
	}
	row.saw = append(row.saw, saw, "retry: "+retry.String())
	row.expect(first.err != nil, "want the first request to lose its connection, got %s", first)
	row.expect(retry.status == http.StatusCreated && retry.replayed, "want the retry to get 201 replayed, got %s", retry)
}

// A burst of 50 concurrent duplicates, released at one instant.
func demoBurst(ctx context.Context, d *demo, row *demoRow) {
	const n = 50
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{delay: 100 * time.Millisecond})
	answers := make([]demoAnswer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i] = d.payPatiently(ctx, key, order, 49900)
		})
	}
	close(start)
	wg.Wait()
	counts := map[string]int{}
	var seen []string
	ids := map[string]bool{}
	fresh, created, waited := 0, 0, 0
	for _, a := range answers {
		if a.conflicts > 0 {
			waited++
		}
		a.conflicts = 0 // summarised below
		s := a.String()
		if counts[s] == 0 {
			seen = append(seen, s)
		}
		counts[s]++
		if a.paymentID != "" {
			ids[a.paymentID] = true
		}
		if a.status == http.StatusCreated {
			created++
			if !a.replayed {
				fresh++
			}
		}
	}
	slices.Sort(seen)
	for _, s := range seen {
		row.saw = append(row.saw, fmt.Sprintf("%d× %s", counts[s], s))
	}
	if waited > 0 {
		row.saw = append(row.saw, fmt.Sprintf("(%d got 409 first and retried)", waited))
	}
	row.expect(created == n, "want 201 for all %d clients, got %d", n, created)
	row.expect(fresh == 1, "want exactly one fresh answer (the rest replayed), got %d", fresh)
	row.expect(len(ids) == 1, "want one payment ID in every answer, got %d", len(ids))
}

// The same key sent again with another amount: rejected with 422, and the
// first payment stands.
func demoOtherAmount(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	first := d.pay(ctx, key, order, 49900)
	other := d.pay(ctx, key, order, 99900)
	row.saw = append(row.saw, first.String(), "other amount: "+other.String())
	row.expect(first.status == http.StatusCreated && !first.replayed, "want 201 for the first payment, got %s", first)
	row.expect(other.status == http.StatusUnprocessableEntity, "want 422 for the other amount, got %s", other)
}

// The payments service is down: the gateway cannot connect, so nothing ran;
// it answers 502 and releases the key. Once the service is back, the retry
// with the same key runs, and charges once.
func demoUpstreamDown(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.down()
	// Let the gateway's connection pool see its idle connections to the
	// service close, as it would long before a real outage is noticed.
	time.Sleep(100 * time.Millisecond)
	first := d.pay(ctx, key, order, 49900)
	charged := d.upstream.chargesFor(order)
	if err := d.upstream.up(); err != nil {
		row.expect(false, "%v", err)
		return
	}
	retry := d.pay(ctx, key, order, 49900)
	again := d.pay(ctx, key, order, 49900)
	row.saw = append(row.saw, "down: "+first.String(), "back: "+retry.String(), again.String())
	row.expect(first.status == http.StatusBadGateway && first.problem == gateway.ProblemUpstreamUnreachable,
		"want 502 %s while the service is down, got %s", gateway.ProblemUpstreamUnreachable, first)
	row.expect(charged == 0, "want no charge while the service is down, got %d", charged)
	row.expect(retry.status == http.StatusCreated && !retry.replayed, "want the retry to run (201, not replayed), got %s", retry)
	row.expect(again.status == http.StatusCreated && again.replayed, "want the next retry replayed, got %s", again)
}

// The client hangs up while the payment runs. The gateway finishes the
// call and stores the answer; the client's retry, after the payment went
// through, gets it at once.
func demoClientGaveUp(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{delay: 300 * time.Millisecond})
	answered := d.upstream.on(order, demoAnswered)
	first := d.payUntil(ctx, key, order, d.upstream.on(order, demoCharged))
	if err := waitClosed(ctx, answered); err != nil {
		row.expect(false, "%v", err)
		return
	}
	time.Sleep(50 * time.Millisecond) // let the gateway store the answer
	retry := d.payPatiently(ctx, key, order, 49900)
	row.saw = append(row.saw, first.String(), "later: "+retry.String())
	row.expect(first.err != nil, "want the client to hang up before the answer, got %s", first)
	row.expect(retry.status == http.StatusCreated && retry.replayed, "want the stored answer (201 replayed), got %s", retry)
}

// No key on an endpoint that requires one: 400, nothing runs.
func demoMissingKey(ctx context.Context, d *demo, row *demoRow) {
	order, _ := d.newPayment(row, 0)
	a := d.pay(ctx, "", order, 49900)
	row.saw = append(row.saw, a.String())
	row.expect(a.status == http.StatusBadRequest && a.problem == retrysafe.ProblemMissingKey, "want 400 %s, got %s", retrysafe.ProblemMissingKey, a)
}

// The payments service charges, then its connection breaks before it
// answers. The gateway cannot know whether the charge happened, so it
// keeps the key locked (until its lease ends) instead of letting a retry
// charge again: the retry gets 409. The client then asks the service for
// the order's status, as it should after any unknown outcome, and finds
// the payment.
func demoUpstreamCut(ctx context.Context, d *demo, row *demoRow) {
	order, key := d.newPayment(row, 1)
	d.upstream.misbehave(order, demoBehaviour{drop: true})
	first := d.pay(ctx, key, order, 49900)
	retry := d.pay(ctx, key, order, 49900)
	charges := -1
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.gwURL+"/payments/"+order, nil)
	req.Header.Set("Authorization", demoCredential)
	if resp, err := d.client.Do(req); err == nil {
		var st struct {
			Charges int `json:"charges"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		charges = st.Charges
	}
	check := "status check: no answer"
	if charges >= 0 {
		check = fmt.Sprintf("status check: %d charge found", charges)
	}
	row.saw = append(row.saw, first.String(), "retry: "+retry.String(), check)
	row.expect(first.status == http.StatusBadGateway && first.problem == gateway.ProblemOutcomeUnknown,
		"want 502 %s, got %s", gateway.ProblemOutcomeUnknown, first)
	row.expect(retry.status == http.StatusConflict, "want 409 while the key is locked, got %s", retry)
	row.expect(charges == 1, "want the status check to show 1 charge, got %d", charges)
}
