package messages_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/pagination"

	"github.com/phasegate/phasegate/messages"
)

func TestModelsJSON(t *testing.T) {
	created := time.Date(2026, 7, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	body := messages.ModelsJSON([]string{"deepseek-v4-pro", "deepseek-v4-flash"}, created)
	var page pagination.Page[anthropic.ModelInfo]
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("the SDK cannot decode %s: %v", body, err)
	}
	if len(page.Data) != 2 || page.HasMore || page.FirstID != "deepseek-v4-pro" || page.LastID != "deepseek-v4-flash" {
		t.Fatalf("page = %s", body)
	}
	m := page.Data[1]
	if m.ID != "deepseek-v4-flash" || m.DisplayName != "deepseek-v4-flash" || string(m.Type) != "model" || !m.CreatedAt.Equal(created) {
		t.Errorf("model = %s", m.RawJSON())
	}

	var empty pagination.Page[anthropic.ModelInfo]
	if err := json.Unmarshal(messages.ModelsJSON(nil, created), &empty); err != nil || len(empty.Data) != 0 {
		t.Errorf("empty list: %v %s", err, messages.ModelsJSON(nil, created))
	}
	var one anthropic.ModelInfo
	if err := json.Unmarshal(messages.ModelJSON(`odd "name"`, created), &one); err != nil || one.ID != `odd "name"` {
		t.Errorf("one model: %v %s", err, messages.ModelJSON(`odd "name"`, created))
	}
}

func TestCountJSON(t *testing.T) {
	var c anthropic.MessageTokensCount
	if err := json.Unmarshal(messages.CountJSON(1234), &c); err != nil || c.InputTokens != 1234 || len(c.JSON.ExtraFields) > 0 {
		t.Errorf("count = %s (%v)", messages.CountJSON(1234), err)
	}
}
