// Package dashboard is hetflow's web view: every coordinator serves it at /
// (and so does `coordinator dev --serve`, on http://127.0.0.1:7070/). Nothing
// is installed: plain HTML, CSS and a little JavaScript are embedded in the
// binary (go:embed), the graphs and timelines are SVG drawn by the server, and the
// pages follow the cluster through server-sent events.
//
// What it shows:
//
//   - / — the cluster: the coordinators (who leads, the raft term), the nodes
//     (alive, suspect, dead, left) with their CPU and GPU workers and how busy
//     they were over the last five seconds, tasks per second and cross-node
//     messages per second; and the runs, newest first, with state, flow, age
//     and progress, and a cancel button for running ones.
//   - /ui/runs/{id} — one run: its graph (layout.go: our own layered layout;
//     fill by task state, outline by the node that ran the task, condition
//     edges dashed, loop-backs as arcs on the right, activations as a ×N badge
//     on loop tasks, module tasks as double boxes that open their instance),
//     its timeline (one lane per node worker, a bar per activation) and the
//     Chrome-trace JSON of the run for Perfetto (/ui/runs/{id}/trace.json).
//     A scope of more than MaxBoxes tasks is drawn as groups of whole,
//     consecutive levels with their progress (one huge level is cut into
//     slices), laid out in rows in reading order (GridPlace); each group
//     opens the tasks it holds. The page's first view is rendered on the
//     server (runpage.go: run.html is a template), so it is complete before
//     any script runs; app.js then follows the run live.
//
// Driving it: New(src, Options{Token: apiToken}) returns an http.Handler
// for "/" and "/ui/"; src is a Source (cluster/coord implements it over its
// FSM, raft, the gossip ring and the JetStream event stream). SelfAuth tells
// the server which paths the dashboard authorises itself; Close ends the open
// event streams (call it before shutting the HTTP server down). The
// dashboard starts no goroutines: each event stream polls on its request's
// goroutine and sends only what changed.
//
// Auth. With a cluster secret every page, image and stream needs the API
// token, as the API does. A browser cannot put a Bearer header on a link, so
// the token is given once, as /?token=TOKEN or through the login form the
// pages answer 401 with, and kept in an HttpOnly, SameSite=Strict cookie
// (CookieName); the Bearer header works too. The cookie opens only the
// dashboard, not /v1/. Cancel is a POST that also needs the X-Hetflow-UI
// header, which a cross-site form cannot send.
//
// What the numbers are. Task events name the node but not the worker, so a
// node's bars are packed onto lanes greedily (at most as many as the node
// ran tasks at once, so at most its workers). A node reports a task's
// activations between two of its task reports (up to 500 ms apart) as the
// latest; the timeline then shows that bar as standing for N activations, and tasks per
// second count every activation (from the activation numbers). Worker load is
// the time the activations in the window took, over the window times the
// workers. Messages per second are the growth of the Sent counters of the
// nodes' termination reports, which every coordinator hears.
package dashboard
