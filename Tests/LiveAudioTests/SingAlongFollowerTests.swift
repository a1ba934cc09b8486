import Foundation
@testable import LiveAudio
import Testing

/// The session's sing-along follower without a device: estimates made up at graph times, the song's anchors and key
/// changes given by hand, the score as the rules say.
@Suite("Sing-along follower: the voice put at the song's time")
struct SingAlongFollowerTests {
    static let rate = 48_000.0
    static let chart: SongChart = {
        var text = "#TITLE:F\n#ARTIST:T\n#BPM:300\n#GAP:1000\n"
        for n in 0..<40 { text += ": \(n * 5) 4 \([0, 2, 4, 5, 7][n % 5]) la\n" + (n % 5 == 4 ? "- \(n * 5 + 4)\n" : "") }
        return try! SongChart.ultraStar(bytes: Array(text.utf8), name: "f.txt")
    }()

    static func follower(region: FilePlayerUnit.Region = .wholeFile) throws -> SingAlongFollower {
        try SingAlongFollower(
            chart: chart, part: 1, difficulty: .hard, format: StreamFormat.graph(sampleRate: rate, channelCount: 1),
            region: region, pitchPath: nil)
    }

    /// An in-tune estimate (shifted by `cents`) for song time `songTime`, at graph time `graphSeconds`.
    static func estimate(songTime: Double, graphSeconds: Double, cents: Double = 0) -> PitchEstimate {
        let note = chart.voices[0].syllables.first { $0.start <= songTime && songTime < $0.end }?.note
        guard let note else { return PitchEstimate(time: graphSeconds, frequency: 0, confidence: 0, voiced: false) }
        let midi = Double(note.midiNote) + cents / 100
        return PitchEstimate(time: graphSeconds, frequency: 440 * pow(2, (midi - 69) / 12), confidence: 1, voiced: true)
    }

    @Test("The round trip is taken off: a voice R late, song started at graph 0.5 s, scores full; a voice not late misses")
    func roundTrip() throws {
        for (late, full) in [(0.1, true), (0.0, false)] {
            let f = try Self.follower()
            try f.start(graphFrame: 24_000, songFrame: 0, tempo: 1, roundTrip: 4_800)
            var t = 0.0
            var estimates: [PitchEstimate] = []
            while t < 11.5 {
                estimates.append(Self.estimate(songTime: t, graphSeconds: 0.5 + t + late))
                t += 0.01
            }
            f.ingest(estimates)
            let total = try #require(f.finish()).total
            #expect(full ? total >= 9_500 : total < 9_000, "late \(late): \(total)")
        }
    }

    @Test("At another tempo the song's time runs at it: at 0.8 a singer following the slower song scores full; one at the chart's own pace misses")
    func tempo() throws {
        for (followsTempo, full) in [(true, true), (false, false)] {
            let f = try Self.follower()
            try f.start(graphFrame: 0, songFrame: 0, tempo: 0.8, roundTrip: 0)
            // Song time t is heard at graph time t / 0.8.
            let estimates = stride(from: 0.0, to: 11.5, by: 0.01).map { t in
                Self.estimate(songTime: t, graphSeconds: followsTempo ? t / 0.8 : t)
            }.sorted { $0.time < $1.time }
            f.ingest(estimates)
            let total = try #require(f.finish()).total
            #expect(full ? total >= 9_500 : total < 5_000, "follows the tempo: \(followsTempo), \(total)")
        }
    }

    @Test("A pause holds the song: nothing is scored while paused, and after the resume the voice maps on from there")
    func pause() throws {
        let f = try Self.follower()
        try f.start(graphFrame: 0, songFrame: 0, tempo: 1, roundTrip: 0)
        var estimates: [PitchEstimate] = []
        var t = 0.0
        while t < 4 { estimates.append(Self.estimate(songTime: t, graphSeconds: t)); t += 0.01 }
        f.ingest(estimates)
        // Paused at song 4 s (graph 4 s) for 2 s; the singer is silent meanwhile... but sings off-key: not scored.
        f.moved(graphFrame: 192_000, songFrame: 192_000, rate: 0)
        estimates = stride(from: 4.0, to: 6.0, by: 0.01).map { Self.estimate(songTime: 1.0, graphSeconds: $0, cents: 300) }
        f.ingest(estimates)
        f.moved(graphFrame: 288_000, songFrame: 192_000, rate: 1)
        estimates = stride(from: 6.0, to: 13.5, by: 0.01).map { Self.estimate(songTime: $0 - 2, graphSeconds: $0) }
        f.ingest(estimates)
        let total = try #require(f.finish()).total
        #expect(total >= 9_500, "\(total)")
    }

    @Test("A key change counts from when the singer hears it; only a region's notes are judged")
    func keyAndRegion() throws {
        let f = try Self.follower()
        try f.start(graphFrame: 0, songFrame: 0, tempo: 1, roundTrip: 0)
        // Two semitones up from graph 4 s on (heard then); the singer follows from then.
        f.setKey(cents: 200, fromGraphFrame: 192_000)
        let estimates = stride(from: 0.0, to: 11.5, by: 0.01).map { Self.estimate(songTime: $0, graphSeconds: $0, cents: $0 >= 4 ? 200 : 0) }
        f.ingest(estimates)
        #expect(try #require(f.finish()).total >= 9_500)

        // A region from 3 s to 5 s: its notes alone are judged, so a singer in tune there and silent elsewhere is full.
        let region = try Self.follower(region: FilePlayerUnit.Region(startFrame: 144_000, frameCount: 96_000, loopCount: 0))
        try region.start(graphFrame: 0, songFrame: 144_000, tempo: 1, roundTrip: 0)
        region.ingest(stride(from: 0.0, to: 2.0, by: 0.01).map { Self.estimate(songTime: 3 + $0, graphSeconds: $0) })
        let result = try #require(region.finish())
        #expect(result.total >= 9_500 && result.beatsJudged < 60, "\(result.total), \(result.beatsJudged) beats")
    }
}
