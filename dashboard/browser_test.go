package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/aglrl/agl/store"
)

// chromium finds the system browser (Debian's chromium package; never
// downloaded by the test). Without one the test is skipped, unless
// AGL_REQUIRE_CHROMIUM=1 (CI) makes that a failure. The short lane skips it.
func chromium(t *testing.T) string {
	if testing.Short() {
		t.Skip("short lane: drives a real browser")
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("AGL_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("AGL_REQUIRE_CHROMIUM=1 but no chromium on PATH: apt-get install -y chromium")
	}
	t.Skip("no chromium on PATH (apt-get install -y chromium); set AGL_REQUIRE_CHROMIUM=1 to fail instead")
	return ""
}

// artifactDir is where screenshots go: $AGL_ARTIFACTS/dashboard, or a
// temporary directory.
func artifactDir(t *testing.T) string {
	dir := t.TempDir()
	if a := os.Getenv("AGL_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "dashboard")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	return abs
}

// TestBrowser loads the dashboard in headless Chromium against a real
// gateway filled with rollouts whose events came from driving the real
// proxy with a tool-calling conversation: it logs in, sees the list update
// live, opens a rollout from the list, finds its tool call, tool result
// and streamed reply in the page, opens the per-token view, the training
// charts and the workers page, and saves screenshots.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	start := time.Now()
	e := newEnv(t, admin)
	// A repository task's evaluation, as the controller appends it.
	e.extra = map[string][]store.NewEvent{"weather-paris": {{Type: "tests", Data: json.RawMessage(
		`{"reward":0,"resolved":false,"reason":"not passing: tests.test_calc.TestCalc.test_add failed","fail_to_pass":{"tests.test_calc.TestCalc.test_add":"failed"},"pass_to_pass":{"tests.test_calc.TestCalc.test_mul":"passed"},"exit":1,"duration_s":0.1,"log":"FAILED (failures=1)","log_bytes":19}`)}}}
	e.weatherRollout(t, "weather-paris", 6, "Paris", 1)
	fill(t, e)
	for s := 1; s <= 6; s++ {
		for _, mode := range []store.Mode{store.ModeTrain, store.ModeVal} {
			r := 0.1*float64(s) + map[store.Mode]float64{store.ModeTrain: 0, store.ModeVal: 0.05}[mode]
			m := fmt.Sprintf(`{"step":%d,"mode":%q,"model_version":%d,"rollouts":16,"reward_mean":%g,"success_rate":%g,"tokens_per_second":%d,"rollout_seconds":%g,"train_seconds":%g,"dropped_groups":%d,"loss":%g}`,
				s, mode, s, r, r, 900+40*s, 3+0.2*float64(s), 1.5, s%2, 0.5/float64(s))
			if err := e.st.PutTrainStep(testCtx(t), store.TrainStep{Run: "agl", Mode: mode, Step: int64(s), Metrics: json.RawMessage(m)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.st.RegisterModel(testCtx(t), store.Model{Name: "agl", Weights: fmt.Sprintf("run/checkpoint-%d", s)}); err != nil {
			t.Fatal(err)
		}
	}
	dir := artifactDir(t)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1000))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	defer cancelB()
	// Start the browser on bctx: it lives as long as the first context
	// that ran it, and ctx below only bounds the steps.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium %s: %v", bin, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	var jsErrors []string
	if err := chromedp.Listen(bctx, func(ev any) {
		var d *runtime.ExceptionDetails
		switch ex := ev.(type) {
		case *runtime.EventExceptionThrown:
			d = ex.ExceptionDetails
		case runtime.EventExceptionThrown:
			d = ex.ExceptionDetails
		}
		if d != nil {
			mu.Lock()
			jsErrors = append(jsErrors, (&chromedp.ExceptionError{ExceptionDetails: d}).Error())
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start chromium %s: %v", bin, err)
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			// From the top, so the sticky header sits where it belongs.
			if _, err := chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)(ctx, tg); err != nil {
				return err
			}
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, buf, 0o644); err != nil {
				return err
			}
			t.Logf("screenshot %s (%d bytes)", p, len(buf))
			return nil
		})
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			// Say where the browser was and what it showed.
			dctx, cancel := context.WithTimeout(bctx, 10*time.Second)
			defer cancel()
			loc, lerr := chromedp.Run(dctx, chromedp.Location())
			body, berr := chromedp.Run(dctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
			serr := chromedp.Do(dctx, shot("failure.png"))
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s: %v\nat %s (%v), JavaScript errors %v, screenshot %v, page text (%v):\n%.2000s", what, err, loc, lerr, jsErrors, serr, berr, body)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		must("text of "+sel, err)
		return s
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
		must("count "+sel, err)
		return n
	}

	must("open", chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("key"))))
	loginURL, err := chromedp.Run(ctx, chromedp.Location())
	must("location", err)
	if !strings.HasSuffix(loginURL, "/login") {
		t.Errorf("not sent to the login form first: %s", loginURL)
	}
	must("log in", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("key"), admin),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="weather-paris"] a.rollout-link`))))
	cookie, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	must("cookie", err)
	if cookie != "" {
		t.Errorf("session cookie visible to scripts: %q", cookie)
	}
	// Live: a rollout created now shows up without a reload.
	if _, err := e.st.CreateRollouts(testCtx(t), []store.NewRollout{{ID: "arrived-live", Metadata: json.RawMessage(`{"step":7}`)}}); err != nil {
		t.Fatal(err)
	}
	must("live update", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`tr[data-id="arrived-live"]`)), shot("rollouts.png")))

	must("open the rollout", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-id="weather-paris"] a.rollout-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#conversation .toolcall`)),
		shot("rollout.png")))
	convText := text("#conversation")
	if tt := text("#tests"); !strings.Contains(tt, "not resolved, reward 0") || !strings.Contains(tt, "tests.test_calc.TestCalc.test_add") || !strings.Contains(tt, "FAILED (failures=1)") {
		t.Errorf("the tests section shows %q", tt)
	}
	toolCalls := count("#conversation .toolcall")
	must("per-token view", chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("show-tokens")),
		chromedp.WaitVisible(chromedp.CSS(`#tokens .sample .tok.m1`)),
		shot("rollout-tokens.png")))
	samplesShown := count("#tokens .sample")
	tokensText := text("#tokens")
	must("training", chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/#/training"),
		chromedp.WaitVisible(chromedp.CSS(`[data-chart="Reward (mean per step)"] polyline`)),
		shot("training.png")))
	lines := count(".chart polyline")
	must("workers", chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/#/workers"),
		chromedp.WaitVisible(chromedp.ID("workers")),
		shot("workers.png")))
	workersText := text("main")

	for _, want := range []string{"get_weather", `"city": "Paris"`, "sunny, 24°C", "It is sunny in Paris, 24°C.", "streamed", "What is the weather in Paris?"} {
		if !strings.Contains(convText, want) {
			t.Errorf("conversation does not show %q:\n%s", want, convText)
		}
	}
	if toolCalls != 1 {
		t.Errorf("%d tool calls shown, want 1", toolCalls)
	}
	if samplesShown != 1 || !strings.Contains(tokensText, "first sample") || !strings.Contains(tokensText, "get_weather") {
		t.Errorf("per-token view: %d samples: %.300s", samplesShown, tokensText)
	}
	if lines < 4 {
		t.Errorf("%d chart lines, want train and val curves", lines)
	}
	if !strings.Contains(workersText, "worker-1") || !strings.Contains(workersText, "serving") {
		t.Errorf("workers page: %.500s", workersText)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(jsErrors) > 0 {
		t.Errorf("JavaScript errors: %v", jsErrors)
	}
	t.Logf("browser test took %s; screenshots in %s", time.Since(start).Round(time.Millisecond), dir)
}
