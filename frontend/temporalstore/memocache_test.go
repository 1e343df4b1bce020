package temporalstore

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jobgate/jobgate/authz"
	"github.com/jobgate/jobgate/workflows"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

var rcNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// rcNeedsInput is an open request with everything that could encode differently.
func rcNeedsInput() *workflows.NeedsInput {
	return &workflows.NeedsInput{InputID: "approve-0123456789ab", Prompt: "Approve <150> episodes & more? «ja»",
		AnswerSchema: map[string]any{"type": "object"}, Approver: authz.ApproverOwner, RequestedBy: "ana", ExpiresAt: rcNow.Add(time.Hour)}
}

func payload(t *testing.T, v any) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNeedsInputCache_Bounded(t *testing.T) {
	c := &needsInputCache{m: make(map[string]decodedNeedsInput)}
	ni := rcNeedsInput()
	for i := range needsInputCacheMaxEntries + 10 {
		c.put(fmt.Appendf(nil, `{"input_id":"%d"}`, i), decodedNeedsInput{ni: ni, view: []byte(`{}`)})
	}
	if len(c.m) != needsInputCacheMaxEntries {
		t.Fatalf("%d entries, want the cap %d", len(c.m), needsInputCacheMaxEntries)
	}
	if _, ok := c.get([]byte(`{"input_id":"0"}`)); ok {
		t.Error("the oldest entry survived")
	}
	big := bytes.Repeat([]byte("x"), needsInputCacheMaxEntry-10)
	for i := range needsInputCacheMaxBytes/len(big) + 10 {
		c.put(fmt.Appendf(big, "%d", i), decodedNeedsInput{ni: ni})
	}
	if c.bytes > needsInputCacheMaxBytes {
		t.Fatalf("%d bytes, max %d", c.bytes, needsInputCacheMaxBytes)
	}
	c.put(bytes.Repeat([]byte("y"), needsInputCacheMaxEntry+1), decodedNeedsInput{ni: ni})
	if _, ok := c.get(bytes.Repeat([]byte("y"), needsInputCacheMaxEntry+1)); ok {
		t.Error("an entry above needsInputCacheMaxEntry was kept")
	}
}

// fromPayload decodes exactly as the default data converter does.
func TestFromPayloadMatchesConverter(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	jsonPayload := func(data string) *commonpb.Payload {
		return &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingJSON)}, Data: []byte(data)}
	}
	payloads := []*commonpb.Payload{
		payload(t, "acme"), payload(t, "a\"b\\c\u00e9<>&\u2028"), payload(t, ""), payload(t, rcNow), payload(t, workflows.Progress{Done: 1, Unit: "rows"}),
		jsonPayload(`"plain"`), jsonPayload(`"esc\u0041\n"`), jsonPayload(`null`), jsonPayload(`7`), jsonPayload(`"\xff"`),
		jsonPayload(`"unterminated`), jsonPayload(` "spaced" `), jsonPayload(``), jsonPayload(`{"done":"x"}`),
		{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("binary/null")}},
		{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("binary/plain")}, Data: []byte("raw")},
	}
	for i, p := range payloads {
		var gotS, wantS string
		gotErr, wantErr := fromPayload(dc, p, &gotS), dc.FromPayload(p, &wantS)
		if (gotErr == nil) != (wantErr == nil) || gotErr == nil && gotS != wantS {
			t.Errorf("%d string %q: got %q %v, want %q %v", i, p.Data, gotS, gotErr, wantS, wantErr)
		}
		var gotT, wantT time.Time
		gotErr, wantErr = fromPayload(dc, p, &gotT), dc.FromPayload(p, &wantT)
		if (gotErr == nil) != (wantErr == nil) || gotErr == nil && !gotT.Equal(wantT) {
			t.Errorf("%d time %q: got %v %v, want %v %v", i, p.Data, gotT, gotErr, wantT, wantErr)
		}
		var gotP, wantP workflows.Progress
		gotErr, wantErr = fromPayload(dc, p, &gotP), dc.FromPayload(p, &wantP)
		if (gotErr == nil) != (wantErr == nil) || gotErr == nil && !reflect.DeepEqual(gotP, wantP) {
			t.Errorf("%d progress %q: got %+v %v, want %+v %v", i, p.Data, gotP, gotErr, wantP, wantErr)
		}
	}
}
