package app

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// screenshot, if set, is where TestStatusPageInChromium saves its
// screenshot: `go test ./app -run TestStatusPageInChromium -screenshot
// ../docs/status-page.png` refreshes the README's.
var screenshot = flag.String("screenshot", "", "save the status page's screenshot to this PNG file")

// pageYAML has two pipelines, so that the page must name both: orders in
// exactly_once mode with a watermark (dedupe, members and leader on the
// page), clicks at least once without a dead-letter output, so that its
// poison is nacked with an error the page lists.
const pageYAML = `
project: p
http: {addr: "127.0.0.1:0"}
shutdown_timeout: 5s
state: {instance: i}
pipelines:
  - name: orders
    source: {topic: orders, subscription: orders-sub, tracking_subscription: orders-tracking, streams: 1}
    sink: {table: orders, row_key: "{message_id}", batch: {max_delay: 1ms}}
  - name: clicks
    mode: at_least_once
    source: {topic: clicks, subscription: clicks-sub, streams: 1}
    sink: {table: clicks, row_key: "{data.user}", batch: {max_delay: 1ms}}
`

// startPageApp runs an App of pageYAML on the fakes, with 20 orders
// committed and one poison click nacked, and returns its base URL.
func startPageApp(t *testing.T) string {
	t.Helper()
	f := newFakes(t)
	ctx := context.Background()
	cfg := parse(t, pageYAML)
	if err := Setup(ctx, cfg, f.ps, f.admin, io.Discard); err != nil {
		t.Fatal(err)
	}
	a, err := Open(ctx, zap.NewNop(), cfg, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	for i := range 20 {
		f.psSrv.Publish("projects/p/topics/orders", []byte(`{"n":`+strconv.Itoa(i)+`}`), nil)
	}
	f.psSrv.Publish("projects/p/topics/clicks", []byte("not json"), nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := a.Pipelines()[0].Status()
		if st.Committed >= 20 && a.Pipelines()[1].Status().Retried >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "http://" + a.Addr()
}

// TestStatusPage: / is HTML naming every pipeline with its state, counts
// and dead letters, the poison's warning among the last errors, and it
// reloads itself; other paths stay 404.
func TestStatusPage(t *testing.T) {
	base := startPageApp(t)
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`id="pipeline-orders"`, `id="pipeline-clicks"`, `<meta http-equiv="refresh" content="5">`,
		`<td>committed</td><td class="n">20</td>`, "no tracking subscription", "invalid_payload",
		"<h3>Dedupe</h3>", "<h3>Members</h3>", "<td>leader</td>", "<h3>Payload</h3>", "<td>format</td><td>json</td>",
		`<td>filtered</td><td class="n">0</td>`, `<td>rows written</td><td class="n">20</td>`,
		"no dead_letter output is configured", // clicks' poison, among its last warnings and errors
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	if r, err := http.Get(base + "/nope"); err != nil || r.StatusCode != 404 {
		t.Errorf("GET /nope: %v %v, want 404", r.StatusCode, err)
	}
}

// TestStatusPageInChromium loads the page in headless Chromium (Debian's
// chromium; CI installs it): it renders, names every pipeline, and its
// screenshot is a real image.
func TestStatusPageInChromium(t *testing.T) {
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("no chromium on PATH: .ci/run installs it (apt-get install chromium)")
		}
		t.Skip("no chromium on PATH (with CI=true this is a failure)")
	}
	base := startPageApp(t)
	dir := t.TempDir()
	chrome := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1280,1400"}, args...)
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, browser, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", browser, args, err, stderr.String())
		}
		return out
	}
	dom := string(chrome("--dump-dom", base+"/"))
	for _, want := range []string{"pipeline-orders", "pipeline-clicks", "committed", "invalid_payload"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM Chromium rendered lacks %q:\n%s", want, dom)
		}
	}
	png := filepath.Join(dir, "status.png")
	chrome("--screenshot="+png, base+"/")
	b, err := os.ReadFile(png)
	if err != nil || len(b) < 10_000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("screenshot: %d bytes, %v", len(b), err)
	}
	if *screenshot != "" {
		if err := os.WriteFile(*screenshot, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
