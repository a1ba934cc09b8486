import AudioCodecs
import AudioCore
import AudioUnits
import SingAlong

/// The pitch of a recorded voice, and the score of a recorded take: what `liveaudio pitch` and `liveaudio score`
/// do, for any caller.
public enum TakeScoring {
    /// Every estimate a ``PitchEstimator`` makes over an audio file (any the decoder reads; several channels are
    /// averaged), at the file's own rate. Times are seconds from the file's first sample.
    /// - Throws: ``AudioError`` from the decoder (a missing or unreadable file) or the estimator (a rate under 16 kHz).
    public static func pitch(ofFile path: String, configuration: PitchEstimator.Configuration = .init()) throws(AudioError)
        -> [PitchEstimate]
    {
        let decoder = try AudioFileDecoder(path: path)
        let estimator = try PitchEstimator(sampleRate: decoder.sampleRate, configuration: configuration)
        let block = 4096
        let buffer = PCMBuffer(channelCount: decoder.channelCount, capacity: block)
        let mono = PCMBuffer(channelCount: 1, capacity: block)
        var estimates: [PitchEstimate] = []
        while true {
            let n = try decoder.read(into: buffer.view(frames: block))
            if n == 0 { break }
            let view = buffer.view(frames: n)
            let m = mono.view(frames: n)[0].baseAddress!
            m.update(from: view[0].baseAddress!, count: n)
            if view.channelCount > 1 {
                for c in 1..<view.channelCount {
                    let x = view[c].baseAddress!
                    for i in 0..<n { m[i] += x[i] }
                }
                let scale = 1 / Float(view.channelCount)
                for i in 0..<n { m[i] *= scale }
            }
            estimator.process(m, count: n) { estimates.append($0) }
        }
        return estimates
    }

    /// Scores a recorded dry voice against a chart's part. The take's first sample is the song's audio at 0 s; a
    /// voice recorded `lateBy` seconds behind the song (a round trip not taken off) is moved back by that much.
    /// - Throws: ``AudioError`` as ``pitch(ofFile:configuration:)``, and `.invalidChart` for a chart without notes
    ///   or without the part.
    public static func score(
        take path: String, chart: SongChart, part: Int = 1, difficulty: SingingDifficulty = .medium, lateBy: Double = 0
    ) throws(AudioError) -> SingingScore.Result {
        let configuration = PitchEstimator.Configuration()
        var score = try SingingScore(chart: chart, voice: part, difficulty: difficulty, estimateInterval: configuration.hop)
        for var e in try pitch(ofFile: path, configuration: configuration) {
            e.time -= lateBy
            score.add(e)
        }
        return score.finish()
    }
}
