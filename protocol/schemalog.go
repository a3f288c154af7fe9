package protocol

import (
	"context"
	"log/slog"

	"github.com/phasegate/phasegate/tools"
)

// logSchemaErr logs, once per judgement, that the judged tool's
// parameters schema did not compile, so the call was judged as if the tool
// had none: the client's fault, which only the operator can see. It goes
// to the default logger, which the gateway's command makes its redacting
// one.
func logSchemaErr(ctx context.Context, requestID string, j tools.Judgement) {
	if j.SchemaErr == nil {
		return
	}
	slog.WarnContext(ctx, "tool parameters schema does not compile; the call was judged without it",
		"request_id", requestID, "tool", j.Tool, "err", j.SchemaErr)
}
