/// The sync rule as numbers: how late each of the room's signals is, on the room's timeline, against the
/// accompaniment it belongs with — the one mechanism every part aligns by. The song mix delays the accompaniment by
/// the wet voice's shift (its delay unit), so the two meet; every sink that records or encodes starts its signal's
/// shift after the take (or the room) does, so its frame k is the accompaniment's frame k and what was sung to it;
/// a recorded singer on the virtual device is released the dry voice's shift after the first frame. Found once,
/// when the room starts. A room with phone voices runs its song mix ``phone`` frames later still: the phones' audio
/// is read that far behind the device (what the network took), and the wired voices are delayed by as much to meet it.
struct Alignment: Sendable, Equatable {
    /// The signals a room records or encodes.
    enum Signal: Sendable {
        /// What the takes play: the time every other signal is measured against.
        case accompaniment
        /// The microphone: late by the round trip and the capture processing.
        case dryVoice
        /// The voice after its chain: later by the chain's latency too.
        case wetVoice
        /// The accompaniment (delayed in the mix by the wet voice's shift) and the wet voice.
        case songMix
        /// A phone voice as it comes out of its source: the dry voice's shift and the phones' delay.
        case phoneDry
        /// A phone voice after its chain.
        case phoneWet
    }

    /// Frames from the accompaniment to the dry voice sung to it.
    var dry = 0
    /// Frames from the accompaniment to the wet voice sung to it.
    var wet = 0
    /// Frames the song mix waits for the phone voices (0 without them).
    var phone = 0

    /// Frames `signal` is late by.
    func shift(_ signal: Signal) -> Int64 {
        switch signal {
        case .accompaniment: 0
        case .dryVoice: Int64(dry)
        case .wetVoice: Int64(wet)
        case .songMix, .phoneWet: Int64(wet + phone)
        case .phoneDry: Int64(dry + phone)
        }
    }

    /// Where a sink of `signal` starts for something that begins at `start`: its frame 0 is the accompaniment's
    /// frame at `start`.
    func start(_ signal: Signal, at start: Int64) -> Int64 { start + shift(signal) }
}
