#if canImport(Glibc)
import Glibc
#endif

/// One reading of a voice's pitch: when (seconds: of the tracker's input, or — for a singing score — of the song's
/// audio the voice was sung at, the round trip taken off), the frequency, how sure the tracker is, and whether the
/// voice sounded at all.
public struct PitchEstimate: Sendable, Equatable {
    /// When, in seconds: on the tracker's input, or, for a singing score, on the song's audio the voice was sung at.
    public var time: Double
    /// Hz. When not ``voiced``, the tracker's best guess (the pitch of the voice around it, if any): for display and
    /// evaluation, never to be judged as sung.
    public var frequency: Double
    /// 0 … 1.
    public var confidence: Double
    /// Whether the voice sounded; when false, ``frequency`` is only a guess.
    public var voiced: Bool

    /// Creates an estimate.
    /// - Parameters:
    ///   - time: when, in seconds.
    ///   - frequency: the pitch in Hz (a guess when not `voiced`).
    ///   - confidence: how sure the tracker is, 0 … 1.
    ///   - voiced: whether the voice sounded.
    public init(time: Double, frequency: Double, confidence: Double, voiced: Bool) {
        self.time = time
        self.frequency = frequency
        self.confidence = confidence
        self.voiced = voiced
    }

    /// The frequency as a MIDI note number with a fraction (69 is A4 at 440 Hz); nil when unvoiced.
    public var midiNote: Double? {
        voiced && frequency > 0 ? 69 + 12 * log2(frequency / 440) : nil
    }
}
