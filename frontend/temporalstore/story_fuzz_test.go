package temporalstore

import (
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// FuzzStoryPayloads: the narrator reads payloads a worker wrote (the start input, the
// needs_input memo, a resume update's request); whatever they hold, it tells a line or skips,
// and never panics.
func FuzzStoryPayloads(f *testing.F) {
	for _, s := range []string{`{"owner":"ana","args":{"dataset":"d","columns":["a"]}}`, `{"input_id":"x","prompt":"p\nq"}`,
		`{"decision":"approve","principal":{"sub":"s"}}`, `null`, `"x"`, `{"state":{"next":-1}}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingJSON)}, Data: data}
		ps := &commonpb.Payloads{Payloads: []*commonpb.Payload{p}}
		evs := []*historypb.HistoryEvent{
			{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
				WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{Input: ps}}},
			{EventId: 2, EventType: enumspb.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED, Attributes: &historypb.HistoryEvent_WorkflowPropertiesModifiedEventAttributes{
				WorkflowPropertiesModifiedEventAttributes: &historypb.WorkflowPropertiesModifiedEventAttributes{
					UpsertedMemo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{workflows.MemoNeedsInput: p}}}}},
			{EventId: 3, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, Attributes: &historypb.HistoryEvent_WorkflowExecutionUpdateAcceptedEventAttributes{
				WorkflowExecutionUpdateAcceptedEventAttributes: &historypb.WorkflowExecutionUpdateAcceptedEventAttributes{
					AcceptedRequest: &updatepb.Request{Input: &updatepb.Input{Name: workflows.UpdateResume, Args: ps}}}}},
			{EventId: 4, EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED}, // attributes missing: unknown step
		}
		for _, kind := range workflows.DefaultKindNames() {
			k, _ := workflows.LookupKind(kind)
			n := newNarrator(k.Story, defaultDC, jobstore.StoryRequest{MaxLines: 10})
			for _, ev := range evs {
				n.event(ev)
			}
			if st := n.finish(); len(st.Lines) == 0 {
				t.Fatalf("%s: no line told", kind)
			}
		}
	})
}
