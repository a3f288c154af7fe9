package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of phasegate_dropped_fields_total.
var (
	// DropDoors are the values of its door label: the front doors whose
	// requests carry fields a chat upstream has no place for.
	DropDoors = []string{"responses", "messages"}
	// DroppedFields are the values of its field label: a kind of hosted
	// tool (tools.web_search, ...), or a request field; any other is
	// counted as other. A door's translator names its drops with these
	// (responses.DropFields, messages.DropFields).
	DroppedFields = []string{
		"tools.web_search_preview", "tools.web_search", "tools.file_search", "tools.code_interpreter", "tools.computer_use_preview",
		"tools.computer_use", "tools.image_generation", "tools.local_shell", "tools.mcp", "tools.custom", "tools.tool_search",
		"tools.shell", "tools.apply_patch", "tools.other",
		"prompt_cache_key", "safety_identifier", "service_tier", "text.verbosity", "client_metadata", "truncation", "include",
		"tools.web_fetch", "tools.code_execution", "tools.text_editor", "tools.bash", "tools.computer", "tools.memory",
		"cache_control", "citations", "context_management", "output_config", "container", "mcp_servers", "inference_geo",
		"metadata", "thinking", "redacted_thinking", "top_k", "tool_choice", "tool_field", "content", "thread",
		"other",
	}
)

func newDropped() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_dropped_fields_total",
		Help: "Parts of requests the gateway accepted and did not send upstream (tools a chat upstream cannot run, fields its chat API lacks), by front door and field; each is named in the X-Phasegate-Dropped header."},
		[]string{"door", "field"})
}

func (m *Metrics) zeroDropped() {
	for _, d := range DropDoors {
		for _, f := range DroppedFields {
			m.dropped.WithLabelValues(d, f)
		}
	}
}

// Dropped counts a part of a request of door (one of DropDoors) that the
// gateway dropped: field is one of DroppedFields, any other counts as
// other.
func (m *Metrics) Dropped(door, field string) {
	if m == nil {
		return
	}
	if !slices.Contains(DroppedFields, field) {
		field = "other"
	}
	m.dropped.WithLabelValues(door, field).Inc()
}
