// Package dashboard is agl's web UI, served by the gateway at /: rollouts
// (filtered, keyset-paged, live), one rollout's attempts and conversation
// with a per-token view, training curves and model versions, workers and
// gateway state. The page is plain HTML, CSS and JavaScript embedded in the
// binary (no build step, nothing fetched at run time); it reads the JSON
// views under /api/dashboard/, which this package serves too.
//
// The dashboard is read-only. With an admin key set, a login form takes the
// key and sets an HttpOnly, SameSite=Strict session cookie: an expiry and an
// HMAC of it keyed by the admin key, so every gateway replica with the same
// key accepts it, changing the key logs everyone out, and the cookie never
// holds the key itself. The JSON views also accept the admin key as a
// bearer token. Scoped attempt keys are never accepted, and no view
// includes a key or a key hash.
package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

//go:embed static
var static embed.FS

// Decoder turns token ids back into text (a tokenizer); the per-token view
// shows each token's text when the dashboard has one.
type Decoder interface {
	Decode(ids []int32) string
}

// Options configure a Dashboard.
type Options struct {
	Store store.Store
	// AdminKey guards the dashboard; empty means open (the gateway then
	// listens on loopback only).
	AdminKey string
	// Status reports the gateway's state (paused, calls in flight, rollout
	// counts); nil shows rollout counts only.
	Status func(context.Context) (api.GatewayStatus, error)
	// Tokenizer, when set, shows token text in the per-token view.
	Tokenizer Decoder
	// Tokenizers, by model name (a policy's, which its calls' events
	// record as their model), decode the samples of that model's calls;
	// Tokenizer decodes the others.
	Tokenizers map[string]Decoder
	// SessionTTL is how long a login lasts (default 7 days).
	SessionTTL time.Duration
	// WorkersWindow: the workers view covers attempts running now or
	// started within this window (default 10m; ?window= overrides).
	WorkersWindow time.Duration
	Logger        *slog.Logger
}

// Dashboard serves the UI and its JSON views.
type Dashboard struct {
	opt    Options
	log    *slog.Logger
	macKey []byte
	assets http.Handler
}

// CookieName is the session cookie's name.
const CookieName = "agl_session"

// New builds a Dashboard; mount it with Register.
func New(opt Options) *Dashboard {
	if opt.SessionTTL <= 0 {
		opt.SessionTTL = 7 * 24 * time.Hour
	}
	if opt.WorkersWindow <= 0 {
		opt.WorkersWindow = 10 * time.Minute
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	d := &Dashboard{opt: opt, log: opt.Logger}
	if opt.AdminKey != "" {
		k := sha256.Sum256([]byte("agl-dashboard-session\x00" + opt.AdminKey))
		d.macKey = k[:]
	}
	sub, _ := fs.Sub(static, "static")
	d.assets = http.StripPrefix("/assets/", http.FileServerFS(sub))
	return d
}

// Register mounts the dashboard's routes with handle (e.g. the gateway's
// Handle): the page at /, /login, /logout, /assets/… and the JSON views
// under /api/dashboard/.
func (d *Dashboard) Register(handle func(pattern string, h http.Handler)) {
	handle("GET /{$}", http.HandlerFunc(d.index))
	handle("GET /login", http.HandlerFunc(d.loginPage))
	handle("POST /login", http.HandlerFunc(d.login))
	handle("POST /logout", http.HandlerFunc(d.logout))
	handle("GET /assets/", http.HandlerFunc(d.asset))
	v := func(pattern string, fn func(w http.ResponseWriter, r *http.Request) error) {
		handle(pattern, d.view(fn))
	}
	v("GET /api/dashboard/rollouts", d.rollouts)
	v("GET /api/dashboard/rollouts/{id}", d.rollout)
	v("GET /api/dashboard/rollouts/{id}/tokens", d.tokens)
	v("GET /api/dashboard/train", d.train)
	v("GET /api/dashboard/state", d.state)
	v("GET /api/dashboard/workers", d.workers)
}

// Handler returns the dashboard alone on a mux (for tests and tools).
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	d.Register(mux.Handle)
	return mux
}

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// authorized reports whether r carries a valid session cookie or the admin
// key as a bearer token (always true without an admin key).
func (d *Dashboard) authorized(r *http.Request) bool {
	if d.opt.AdminKey == "" {
		return true
	}
	if c, err := r.Cookie(CookieName); err == nil && d.validSession(c.Value, time.Now()) {
		return true
	}
	return d.isAdminKey(bearer(r))
}

func bearer(r *http.Request) string {
	k, err := api.RequestKey(r)
	if err != nil {
		return ""
	}
	return k
}

// isAdminKey compares k with the admin key in constant time.
func (d *Dashboard) isAdminKey(k string) bool {
	if k == "" || d.opt.AdminKey == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(k)), sha256.Sum256([]byte(d.opt.AdminKey))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// session returns a cookie value valid until exp: "EXP.HMAC(EXP)".
func (d *Dashboard) session(exp time.Time) string {
	ts := strconv.FormatInt(exp.Unix(), 10)
	m := hmac.New(sha256.New, d.macKey)
	m.Write([]byte(ts))
	return ts + "." + hex.EncodeToString(m.Sum(nil))
}

func (d *Dashboard) validSession(v string, now time.Time) bool {
	ts, sig, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	exp, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Unix() >= exp {
		return false
	}
	want := d.session(time.Unix(exp, 0))
	return hmac.Equal([]byte(want[len(ts)+1:]), []byte(sig))
}

func (d *Dashboard) index(w http.ResponseWriter, r *http.Request) {
	if !d.authorized(r) {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	d.page(w, "index.html", http.StatusOK, "")
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	if d.opt.AdminKey == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	d.page(w, "login.html", http.StatusOK, "")
}

// page serves an embedded HTML page; msg fills its <!--MESSAGE--> slot.
func (d *Dashboard) page(w http.ResponseWriter, name string, status int, msg string) {
	b, err := static.ReadFile("static/" + name)
	if err != nil {
		http.Error(w, "dashboard page missing", http.StatusInternalServerError)
		return
	}
	if msg != "" {
		b = []byte(strings.Replace(string(b), "<!--MESSAGE-->", `<p class="error" role="alert">`+msg+`</p>`, 1))
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b)
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if d.opt.AdminKey == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		d.page(w, "login.html", http.StatusBadRequest, "Could not read the form.")
		return
	}
	key := r.PostForm.Get("key")
	if !d.isAdminKey(key) {
		if strings.HasPrefix(key, store.KeyPrefix) {
			d.page(w, "login.html", http.StatusUnauthorized, "That is a scoped attempt key: the dashboard needs the admin key.")
			return
		}
		d.page(w, "login.html", http.StatusUnauthorized, "Wrong key.")
		return
	}
	exp := time.Now().Add(d.opt.SessionTTL)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: d.session(exp), Path: "/", Expires: exp,
		MaxAge: int(d.opt.SessionTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// secure: the cookie is Secure when the page came over HTTPS (directly or
// through a proxy that says so).
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (d *Dashboard) asset(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	w.Header().Set("Cache-Control", "no-cache")
	d.assets.ServeHTTP(w, r)
}

// view guards a JSON view and turns its error into a JSON error.
func (d *Dashboard) view(fn func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-store")
		if !d.authorized(r) {
			api.WriteError(w, d.log, &api.Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "log in at /login, or send the admin key as Authorization: Bearer <key>"})
			return
		}
		if err := fn(w, r); err != nil {
			api.WriteError(w, d.log, err)
		}
	})
}

func badRequest(format string, args ...any) error {
	return api.Errorf(http.StatusBadRequest, "invalid_request", format, args...)
}
