package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/retrysafe/retrysafe"
	"github.com/retrysafe/retrysafe/admin"
)

// MetricPrefix starts the name of every metric the gateway exports.
const MetricPrefix = "retrysafe_"

// Metrics is a [retrysafe.Observer] that records the engine's events, and
// the gateway's own, as Prometheus metrics:
//
//	retrysafe_requests_total{outcome}                    counter
//	retrysafe_request_duration_seconds{outcome}          histogram
//	retrysafe_store_operation_duration_seconds{op}       histogram
//	retrysafe_store_errors_total{op}                     counter
//	retrysafe_in_flight                                  gauge
//	retrysafe_upstream_duration_seconds{result}          histogram
//	retrysafe_upstream_errors_total{kind}                counter
//	retrysafe_sweep_deleted_total                        counter
//	retrysafe_sweep_errors_total                         counter
//	retrysafe_replays_total{status_class}                counter
//	retrysafe_unknown_outcomes{route}                    gauge
//	retrysafe_resolve_calls_total{source,outcome}        counter
//	retrysafe_completer_records_total{result}            counter
//	retrysafe_unknown_takeovers_total{route,cause}       counter
//
// outcome is one of [retrysafe.Outcome]'s values (new, replayed, conflict,
// mismatch, invalid_key, missing_key, unauthorized, empty_scope, too_large, store_error, fail_open,
// released, abandoned, lease_lost, bad_request_body, store_full, blocked); op is claim, get, extend, complete or
// release; result is response, not_sent, unknown or canceled (an
// unprotected request whose client went away); kind is not_sent or unknown;
// status_class is the replayed answer's: 2xx, 3xx, 4xx or 5xx.
// retrysafe_unknown_outcomes counts, at a scrape, the attempts whose
// outcome is unknown in the store (when it implements admin.Admin);
// the resolve URL's answers are counted by source (request, completer)
// and outcome (done, not_done, unknown), and what the completer did with
// each stranded record by result (completed, awaiting_retry, blocked, skipped).
// retrysafe_unknown_takeovers_total counts the requests that took over an
// attempt whose outcome was unknown and went upstream again
// (Idempotency-Attempt above 1), by route and by what the earlier attempt
// ended with: timeout, cut_after_send (the connection failed after the
// request was sent) or lease_expired (no cause recorded: the gateway
// stopped or lost the store mid-request, or the handler panicked).
type Metrics struct {
	requests         *prometheus.CounterVec
	requestDuration  *prometheus.HistogramVec
	storeDuration    *prometheus.HistogramVec
	storeErrors      *prometheus.CounterVec
	inFlight         prometheus.Gauge
	upstreamDuration *prometheus.HistogramVec
	upstreamErrors   *prometheus.CounterVec
	sweepDeleted     prometheus.Counter
	sweepErrors      prometheus.Counter
	replays          *prometheus.CounterVec
	resolveCalls     *prometheus.CounterVec
	completerRecords *prometheus.CounterVec
	unknownTakeovers *prometheus.CounterVec
	rates            rateRing // per-second outcomes for the operator page
}

var _ retrysafe.Observer = (*Metrics)(nil)

// allOutcomes are pre-set to zero so that every series exists from the start.
var allOutcomes = []retrysafe.Outcome{
	retrysafe.OutcomeNew, retrysafe.OutcomeReplayed, retrysafe.OutcomeConflict,
	retrysafe.OutcomeMismatch, retrysafe.OutcomeInvalidKey, retrysafe.OutcomeMissingKey,
	retrysafe.OutcomeUnauthorized, retrysafe.OutcomeEmptyScope,
	retrysafe.OutcomeTooLarge, retrysafe.OutcomeStoreError, retrysafe.OutcomeFailOpen,
	retrysafe.OutcomeReleased, retrysafe.OutcomeAbandoned, retrysafe.OutcomeLeaseLost,
	retrysafe.OutcomeBadRequestBody, retrysafe.OutcomeStoreFull, retrysafe.OutcomeFirstSentExpired, retrysafe.OutcomeBlocked,
}

var storeOps = []string{"claim", "get", "extend", "complete", "release"}

// NewMetrics creates the gateway's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	// Store calls take from well under a millisecond (memory, SQLite) to
	// tens of milliseconds (a remote database under load).
	storeBuckets := []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrefix + "requests_total",
			Help: "Protected requests by outcome.",
		}, []string{"outcome"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricPrefix + "request_duration_seconds",
			Help:    "Time spent on a protected request, including the upstream call, by outcome.",
			Buckets: prometheus.DefBuckets,
		}, []string{"outcome"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricPrefix + "store_operation_duration_seconds",
			Help:    "Latency of idempotency store operations.",
			Buckets: storeBuckets,
		}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrefix + "store_errors_total",
			Help: "Failed idempotency store operations.",
		}, []string{"op"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricPrefix + "in_flight",
			Help: "Protected operations executing now (claimed, waiting for the upstream).",
		}),
		upstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricPrefix + "upstream_duration_seconds",
			Help:    "Time from sending a request upstream to its response headers (or the error), by result.",
			Buckets: prometheus.DefBuckets,
		}, []string{"result"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrefix + "upstream_errors_total",
			Help: "Upstream failures: not_sent (nothing was delivered; key released) or unknown (the upstream may have received the request; key kept until its lease ends).",
		}, []string{"kind"}),
		sweepDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricPrefix + "sweep_deleted_total",
			Help: "Expired records deleted, and abandoned processing records retired, by the background sweeper.",
		}),
		sweepErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricPrefix + "sweep_errors_total",
			Help: "Failed background sweeps.",
		}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrefix + "replays_total",
			Help: "Stored answers replayed, by the class of their status: a stream of replayed 5xx means clients retry into a stored failure.",
		}, []string{"status_class"}),
		resolveCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrefix + "resolve_calls_total",
			Help: "Calls to a route's resolve URL about an unknown outcome, by source (request: a retry; completer: the sweeper) and outcome (done, not_done, unknown: any failure).",
		}, []string{"source", "outcome"}),
		completerRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrefix + "completer_records_total",
			Help: "Stranded records the completer handled, by result: completed (the resolve URL said done), awaiting_retry (not_done: marked, left for the next retry, which takes it over as the next attempt), blocked (unknown or a failure), skipped (changed meanwhile).",
		}, []string{"result"}),
		unknownTakeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPrefix + "unknown_takeovers_total",
			Help: "Requests that took over an attempt whose outcome was unknown and went upstream again (Idempotency-Attempt > 1): the operation may now run twice. By route and by how the earlier attempt ended (cause: timeout, cut_after_send, lease_expired: no cause recorded).",
		}, []string{"route", "cause"}),
	}
	for _, c := range []prometheus.Collector{
		m.requests, m.requestDuration, m.storeDuration, m.storeErrors, m.inFlight,
		m.upstreamDuration, m.upstreamErrors, m.sweepDeleted, m.sweepErrors, m.replays, m.resolveCalls, m.completerRecords, m.unknownTakeovers,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range allOutcomes {
		m.requests.WithLabelValues(string(o))
	}
	for _, op := range storeOps {
		m.storeErrors.WithLabelValues(op)
	}
	for _, k := range []string{upstreamNotSent, upstreamUnknown} {
		m.upstreamErrors.WithLabelValues(k)
	}
	for _, c := range statusClasses {
		m.replays.WithLabelValues(c)
	}
	return m, nil
}

// registerBatchMetrics exports the group commit's counts of a store that
// batches (SQLite, PostgreSQL), read at each scrape: the mean batch size
// is rate(..._batch_items_total) / rate(..._batches_total).
func registerBatchMetrics(reg prometheus.Registerer, b admin.Batcher) error {
	counters := []struct {
		name, help string
		value      func(admin.BatchStats) int64
	}{
		{"store_batches_total", "Batches (transactions with one commit each) the store ran for concurrent calls (group commit).",
			func(s admin.BatchStats) int64 { return s.Batches }},
		{"store_batch_items_total", "Store calls those batches held.",
			func(s admin.BatchStats) int64 { return s.Items }},
		{"store_batches_single_total", "Batches that held one call.",
			func(s admin.BatchStats) int64 { return s.Single }},
		{"store_batch_alone_total", "Calls a batch left undecided that then ran on their own (a second call on a key of the batch, a takeover, a row another transaction held, a failed batch).",
			func(s admin.BatchStats) int64 { return s.Alone }},
	}
	for _, c := range counters {
		value := c.value
		if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricPrefix + c.name, Help: c.help},
			func() float64 { return float64(value(b.BatchStats())) })); err != nil {
			return err
		}
	}
	return nil
}

// NewRegistry returns a Prometheus registry holding the Go runtime and
// process collectors under their standard names (go_goroutines,
// process_cpu_seconds_total, …), which every Go dashboard expects. The
// gateway's own metrics, registered by [NewMetrics], start with
// [MetricPrefix].
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Outcome implements [retrysafe.Observer].
func (m *Metrics) Outcome(o retrysafe.Outcome, d time.Duration) {
	m.requests.WithLabelValues(string(o)).Inc()
	m.requestDuration.WithLabelValues(string(o)).Observe(d.Seconds())
	m.rates.add(o, time.Now())
}

// StoreCall implements [retrysafe.Observer].
func (m *Metrics) StoreCall(op string, d time.Duration, err error) {
	m.storeDuration.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}

var statusClasses = []string{"2xx", "3xx", "4xx", "5xx"}

// replayed counts a replayed answer of status by its class.
func (m *Metrics) replayed(status int) {
	if status >= 200 && status < 600 {
		m.replays.WithLabelValues(statusClasses[status/100-2]).Inc()
	}
}

// InFlight implements [retrysafe.Observer].
func (m *Metrics) InFlight(delta int) { m.inFlight.Add(float64(delta)) }

// completed counts what one completer pass did.
func (m *Metrics) completed(n retrysafe.Stranded) {
	m.completerRecords.WithLabelValues("completed").Add(float64(n.Completed))
	m.completerRecords.WithLabelValues("awaiting_retry").Add(float64(n.AwaitingRetry))
	m.completerRecords.WithLabelValues("blocked").Add(float64(n.Blocked))
	m.completerRecords.WithLabelValues("skipped").Add(float64(n.Skipped))
}

func (m *Metrics) upstream(result string, d time.Duration) {
	m.upstreamDuration.WithLabelValues(result).Observe(d.Seconds())
	if result == upstreamNotSent || result == upstreamUnknown {
		m.upstreamErrors.WithLabelValues(result).Inc()
	}
}
