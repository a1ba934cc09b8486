@testable import LiveAudio
import Testing

/// The karaoke accompaniment's normalisation gain (`karaoke --normalize`): to the target where the true peak
/// allows, never below the target for a song's own peak, at most +12 dB.
@Suite struct AccompanimentGainTests {
    typealias N = KaraokeSession.AccompanimentNormalization

    @Test func theRules() {
        // A quiet song with room: all the way (−30 LUFS, −20 dBTP, target −18: +12, room +19).
        #expect(N.gain(wanted: 12, room: 19) == (12, false, false))
        // Room for less than wanted: up to the ceiling (−25 LUFS at −4 dBTP: wanted +7, room +3).
        #expect(N.gain(wanted: 7, room: 3) == (3, true, false))
        // Over the ceiling already and under the target: left as it is, not turned down.
        #expect(N.gain(wanted: 2, room: -1.3) == (0, true, false))
        // Louder than the target, peaks over the ceiling: down to the target; the target is reached.
        #expect(N.gain(wanted: -1, room: -3) == (-1, false, false))
        // Louder than the target with room: down to the target.
        #expect(N.gain(wanted: -6, room: 4) == (-6, false, false))
        // Very quiet with room: +12 dB at most, and said.
        #expect(N.gain(wanted: 17, room: 20) == (12, false, true))
    }
}
