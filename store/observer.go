package store

// Observer hears of a store's writes once they succeeded: events
// appended, recorded or appended late; reaper passes; trainer steps. A
// store opened with one (sqlite.Options.Observer,
// postgres.Options.Observer) calls it on the writer's goroutine, after
// the write and outside its transaction, so its methods must be quick
// and must not write to the store. The metrics of /metrics are one.
type Observer interface {
	// EventsStored: evs were appended, or made durable by RecordEvents,
	// or appended late, to one attempt.
	EventsStored(evs []NewEvent)
	// Reaped: a reaper pass did r.
	Reaped(r ReapResult)
	// TrainStepStored: t was recorded.
	TrainStepStored(t TrainStep)
}
