package metrics

import "github.com/prometheus/client_golang/prometheus"

// Bounds of the gateway's resources, the bound label of
// phasegate_requests_bounded_total.
const (
	// BoundInflightBytes: the memory requests in flight hold was at
	// MAX_INFLIGHT_BYTES; the request was answered 503.
	BoundInflightBytes = "inflight_bytes"
	// BoundBodyTimeout: the request body did not arrive within
	// BODY_READ_TIMEOUT; the request was answered 408.
	BoundBodyTimeout = "body_read_timeout"
	// BoundInflightShare: the bodies in flight of one client key (or one
	// client address, without client keys) were at its share of
	// MAX_INFLIGHT_BYTES (MAX_INFLIGHT_SHARE); the request was answered
	// 429.
	BoundInflightShare = "inflight_share"
	// BoundBodyTooSlow: the request body arrived slower than
	// MIN_BODY_RATE once MIN_BODY_RATE_GRACE had passed; the request was
	// answered 408.
	BoundBodyTooSlow = "body_too_slow"
)

// Bounds are the values of the bound label.
var Bounds = []string{BoundInflightBytes, BoundBodyTimeout, BoundInflightShare, BoundBodyTooSlow}

func newBounded() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_requests_bounded_total",
		Help: "Requests refused by a bound of the gateway's resources: the memory of requests in flight (503), one client's share of it (429), the time to read a body and its rate (408)."}, []string{"bound"})
}

func newInflightBytes() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "phasegate_inflight_body_bytes",
		Help: "Bytes the requests in flight are charged against MAX_INFLIGHT_BYTES (8 times their body bytes)."})
}

// InflightBytes adds delta to the bytes charged against the bound of
// requests in flight.
func (m *Metrics) InflightBytes(delta int64) {
	if m != nil {
		m.inflightBytes.Add(float64(delta))
	}
}

// Bounded counts a request refused by a bound of the gateway's resources.
func (m *Metrics) Bounded(bound string) {
	if m != nil {
		m.bounded.WithLabelValues(bound).Inc()
	}
}
