package contract

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestParseCatalogEnvAndTaskQueue(t *testing.T) {
	const cmd = `"kind":"command","command":["sh","-c","true"]`
	for _, c := range []struct {
		name, doc string
		wantErr   string // substring; "" means valid
	}{
		{"env names", `{"suites":[{"name":"c",` + cmd + `,"env":["OPENAI_API_KEY","_X","a1"]}]}`, ""},
		{"empty env", `{"suites":[{"name":"c",` + cmd + `,"env":[]}]}`, ""},
		{"task queue", `{"suites":[{"name":"c",` + cmd + `,"task_queue":"jobgate-episodes"}]}`, ""},
		{"task queue on demo", `{"suites":[{"name":"d","kind":"demo","task_queue":"q/1:a@b.c"}]}`, ""},
		{"NAME=value", `{"suites":[{"name":"c",` + cmd + `,"env":["OPENAI_API_KEY=sk-1"]}]}`, `env[0] "OPENAI_API_KEY=sk-1": want a variable name`},
		{"empty name", `{"suites":[{"name":"c",` + cmd + `,"env":[""]}]}`, `env[0] "": want a variable name`},
		{"leading digit", `{"suites":[{"name":"c",` + cmd + `,"env":["1X"]}]}`, `env[0] "1X"`},
		{"space", `{"suites":[{"name":"c",` + cmd + `,"env":["A B"]}]}`, `env[0] "A B"`},
		{"duplicate", `{"suites":[{"name":"c",` + cmd + `,"env":["A","B","A"]}]}`, `env[2] "A": named twice`},
		{"jobgate", `{"suites":[{"name":"c",` + cmd + `,"env":["JOBGATE_ARTIFACTS"]}]}`, `env[0] "JOBGATE_ARTIFACTS": JOBGATE_*`},
		{"jobgate lower", `{"suites":[{"name":"c",` + cmd + `,"env":["jobgate_x"]}]}`, `JOBGATE_*`},
		{"not a string", `{"suites":[{"name":"c",` + cmd + `,"env":[1]}]}`, `cannot unmarshal number`},
		{"env on demo", `{"suites":[{"name":"d","kind":"demo","env":["A"]}]}`, `env applies only to kind command`},
		{"env on http", `{"suites":[{"name":"h","kind":"http","url":"http://r/e","env":["A"]}]}`, `env applies only to kind command`},
		{"too many", `{"suites":[{"name":"c",` + cmd + `,"env":[` + manyNames(65) + `]}]}`, `at most 64 names`},
		{"queue space", `{"suites":[{"name":"c",` + cmd + `,"task_queue":"a b"}]}`, `task_queue "a b"`},
		{"queue system", `{"suites":[{"name":"c",` + cmd + `,"task_queue":"/_sys/x"}]}`, `task_queue "/_sys/x"`},
		{"queue long", `{"suites":[{"name":"c",` + cmd + `,"task_queue":"` + strings.Repeat("q", 201) + `"}]}`, `task_queue`},
		{"unknown field", `{"suites":[{"name":"c",` + cmd + `,"environment":["A"]}]}`, `unknown field "environment"`},
		{"trailing", `{"suites":[]} {}`, `trailing data`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cat, err := ParseCatalog([]byte(c.doc))
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				if _, ok := cat["demo"]; !ok {
					t.Fatal("the demo suite is gone")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want it to contain %q", err, c.wantErr)
			}
		})
	}
}

func manyNames(n int) string {
	var names []string
	for i := range n {
		names = append(names, `"N`+strings.Repeat("X", i)+`"`)
	}
	return strings.Join(names, ",")
}

func TestCatalogTaskQueues(t *testing.T) {
	cat, err := ParseCatalog([]byte(`{"suites":[
		{"name":"a","kind":"command","command":["x"],"task_queue":"q2"},
		{"name":"b","kind":"command","command":["x"],"task_queue":"q1"},
		{"name":"c","kind":"demo","task_queue":"q2"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cat.TaskQueues(); !slices.Equal(got, []string{"q1", "q2"}) {
		t.Fatalf("TaskQueues = %v", got)
	}
	if cat["demo"].TaskQueue != "" {
		t.Fatal("the built-in demo suite has a task queue")
	}
}

// FuzzParseCatalog: any document either parses into a catalog whose suites satisfy the
// documented invariants, or is refused with an error; never a panic.
func FuzzParseCatalog(f *testing.F) {
	for _, s := range []string{
		`{"suites":[{"name":"c","kind":"command","command":["sh"],"env":["A","B"],"task_queue":"q"}]}`,
		`{"suites":[{"name":"h","kind":"http","url":"http://r/e","request_timeout":"5s"}]}`,
		`{"suites":[{"name":"c","kind":"command","command":["sh"],"env":["A","A"]}]}`,
		`{"suites":[{"name":"d","kind":"demo","env":null,"task_queue":""}]}`,
		`{"suites":[]}`, `{}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cat, err := ParseCatalog(b)
		if err != nil {
			return
		}
		for name, s := range cat {
			if name != s.Name || !suiteNameRE.MatchString(name) {
				t.Fatalf("suite %q under name %q", s.Name, name)
			}
			if len(s.Env) > 0 && s.Kind != SuiteCommand {
				t.Fatalf("suite %q of kind %s has env", name, s.Kind)
			}
			seen := map[string]bool{}
			for _, n := range s.Env {
				if !envNameRE.MatchString(n) || seen[n] || strings.HasPrefix(strings.ToUpper(n), "JOBGATE_") {
					t.Fatalf("suite %q: env name %q accepted", name, n)
				}
				seen[n] = true
			}
			if s.TaskQueue != "" && !taskQueueRE.MatchString(s.TaskQueue) {
				t.Fatalf("suite %q: task queue %q accepted", name, s.TaskQueue)
			}
			if _, err := json.Marshal(s); err != nil {
				t.Fatalf("suite %q does not marshal: %v", name, err)
			}
		}
	})
}

// TestSuiteCost: cost_unit and max_episode_cost are checked at load, naming the field; the demo
// suite reports usd, its worst episode cost is its params.cost, and params.cost is checked and
// never defaulted (a run without it keeps its digest from before costs).
func TestSuiteCost(t *testing.T) {
	for _, c := range []struct {
		doc, want string
	}{
		{`{"suites":[{"name":"m","kind":"command","command":["x"],"cost_unit":"USD"}]}`, "cost_unit"},
		{`{"suites":[{"name":"m","kind":"command","command":["x"],"max_episode_cost":0.5}]}`, "max_episode_cost needs a cost_unit"},
		{`{"suites":[{"name":"m","kind":"command","command":["x"],"cost_unit":"usd","max_episode_cost":-1}]}`, "max_episode_cost"},
	} {
		_, err := ParseCatalog([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %q", c.doc, err, c.want)
		}
	}
	cat, err := ParseCatalog([]byte(`{"suites":[{"name":"m","kind":"command","command":["x"],"cost_unit":"tokens","max_episode_cost":4000}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if m := cat["m"]; m.CostUnit != "tokens" || m.WorstEpisodeCost(nil) != 4000 {
		t.Errorf("suite m: %+v", m)
	}
	demo := cat["demo"]
	if demo.CostUnit != "usd" {
		t.Errorf("demo cost_unit %q", demo.CostUnit)
	}
	p, err := demo.NormalizeParams(map[string]any{"cost": 0.02})
	if err != nil || demo.WorstEpisodeCost(p) != 0.02 {
		t.Errorf("demo params.cost: %v %v", p, err)
	}
	if p, _ := demo.NormalizeParams(nil); p["cost"] != nil {
		t.Errorf("params.cost defaulted: %v", p)
	}
	if _, err := demo.NormalizeParams(map[string]any{"cost": -0.5}); err == nil || !strings.Contains(err.Error(), "params.cost") {
		t.Errorf("negative params.cost: %v", err)
	}
}
