import AudioCodecs
import AudioCore
import AudioUnits
import SingAlong

/// The pitch of a recorded voice, and the score of a recorded take: what `liveaudio pitch` and `liveaudio score`
/// do, for any caller.
public enum TakeScoring {
    /// Every estimate a ``/AudioUnits/PitchEstimator`` makes over an audio file (any the decoder reads, mixed to mono
    /// by it), at the file's own rate. Times are seconds from the file's first sample.
    /// - Throws: ``/AudioCore/AudioError`` from the decoder (a missing or unreadable file) or the estimator (a rate
    ///   under 16 kHz).
    public static func pitch(ofFile path: String, configuration: PitchEstimator.Configuration = .init()) throws(AudioError)
        -> [PitchEstimate]
    {
        // Mono, as the decoder mixes it (FFmpeg's downmix).
        let decoder = try AudioFileDecoder(path: path, channelCount: 1)
        let estimator = try PitchEstimator(sampleRate: decoder.sampleRate, configuration: configuration)
        let block = 4096
        let buffer = PCMBuffer(channelCount: 1, capacity: block)
        var estimates: [PitchEstimate] = []
        while true {
            let n = try decoder.read(into: buffer.view(frames: block))
            if n == 0 { break }
            estimator.process(buffer.view(frames: n)[0].baseAddress!, count: n) { estimates.append($0) }
        }
        estimator.flush { estimates.append($0) }
        return estimates
    }

    /// Scores a recorded dry voice against a chart's part. The take's first sample is the song's audio at 0 s; a
    /// voice recorded `lateBy` seconds behind the song (a round trip not taken off) is moved back by that much.
    /// - Throws: ``/AudioCore/AudioError`` as ``pitch(ofFile:configuration:)``, and `.invalidChart` for a chart
    ///   without notes or without the part.
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
