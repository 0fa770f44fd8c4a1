package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/hetflow/hetflow/cluster/proto"
)

// Live updates are server-sent events (text/event-stream). A stream polls
// its source every Tick on the request's goroutine and sends an event only
// when the data changed; a comment line every keepAlive keeps proxies from
// closing an idle stream. It ends when the client goes, when the data says
// it is final (a finished run: one "end" event after the last data), or when
// the dashboard is closed.

const keepAlive = 15 * time.Second

// sseWriter writes server-sent events.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	// A stream outlives the server's read and write limits, which bound a
	// request and its answer: lift them for this one (it ends by itself;
	// the connection limit bounds how many there are).
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: rc}
}

// event writes one event: "event: name" and the data, one "data:" line per
// line of it.
func (s *sseWriter) event(name string, data []byte) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\n", name)
	for _, line := range bytes.Split(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	if _, err := s.w.Write(b.Bytes()); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseWriter) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.rc.Flush()
}

// poll is one look at the data: the event to send (its JSON) and whether
// nothing will change any more.
type poll func() (name string, v any, final bool, err error)

// stream sends p's events while they change, until the request ends, p says
// final, or the dashboard closes.
func (d *Dashboard) stream(w http.ResponseWriter, r *http.Request, p poll) {
	s := newSSE(w)
	var last []byte
	tick := time.NewTicker(d.tick)
	defer tick.Stop()
	lastWrite := time.Now()
	for {
		began := time.Now()
		name, v, final, err := p()
		took := time.Since(began)
		if err != nil {
			b, _ := json.Marshal(map[string]string{"error": err.Error()})
			_ = s.event("error", b)
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			return
		}
		if !bytes.Equal(b, last) {
			if s.event(name, b) != nil {
				return
			}
			last, lastWrite = b, time.Now()
		} else if time.Since(lastWrite) >= keepAlive {
			if s.comment("keep-alive") != nil {
				return
			}
			lastWrite = time.Now()
		}
		if final {
			_ = s.event("end", []byte("{}"))
			return
		}
		// A poll of a huge run costs more than a tick: wait at least thrice
		// what it took, so one page never keeps a core busy.
		if wait := 3*took - d.tick; wait > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-d.closed:
				return
			case <-time.After(wait):
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-d.closed:
			return
		case <-tick.C:
		}
	}
}

func (d *Dashboard) handleOverviewEvents(w http.ResponseWriter, r *http.Request) {
	d.stream(w, r, func() (string, any, bool, error) {
		o := d.overview(r.Context())
		for i := range o.Runs { // ages tick every second; send changes, not clocks
			if o.Runs[i].Finished == nil {
				o.Runs[i].AgeMS = o.Runs[i].AgeMS / 1000 * 1000
			}
		}
		return "overview", o, false, nil
	})
}

func (d *Dashboard) handleRunEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, ok := d.src.Run(id); !ok {
		writeErr(w, ErrNotFound)
		return
	}
	d.stream(w, r, func() (string, any, bool, error) {
		s, err := d.brief(r.Context(), id, true)
		if err != nil {
			return "", nil, false, err
		}
		final := s.Finished != nil && proto.Finished(s.State) && d.now().Sub(*s.Finished) > time.Second
		s.AgeMS = s.AgeMS / 1000 * 1000
		return "summary", s, final, nil
	})
}
