import AudioCodecs
import Foundation
import LiveAudio
import Testing
import TestSupport

/// Encodes `signal` into `path` (the container by extension) and returns the encoder and its packets.
func encodeFile(_ signal: [[Float]], sampleRate: Double = 48_000, bitRate: Int = 128_000, to path: String) throws
    -> (AACEncoder, [AACPacket])
{
    let encoder = try AACEncoder(
        settings: AACEncoderSettings(sampleRate: sampleRate, channelCount: signal.count, bitRate: bitRate))
    let writer = try AACFileWriter(path: path, encoder: encoder)
    let input = PCMBuffer(channels: signal)
    var packets: [AACPacket] = []
    // In uneven pieces, as a capture callback would deliver them.
    var done = 0
    var piece = 441
    while done < signal[0].count {
        let n = min(piece, signal[0].count - done)
        let p = try encoder.encode(input.view(frames: signal[0].count).slice(from: done, frames: n))
        try writer.write(p)
        packets += p
        done += n
        piece = piece == 441 ? 2000 : 441
    }
    let tail = try encoder.flush()
    try writer.write(tail)
    packets += tail
    try writer.finish(inputFrames: encoder.inputFrames)
    return (encoder, packets)
}

/// The lag (within ±`range`) that best lines `decoded` up with `reference`, by the dot product over the whole
/// overlap: the chirp's high-frequency end makes the peak sharp, which a window at its 200 Hz start would not.
func bestLag(of reference: [Float], in decoded: [Float], range: ClosedRange<Int> = -8...8) -> Int {
    var best = -Double.infinity
    var bestLag = 0
    for lag in range {
        var dot = 0.0
        for i in max(0, -lag)..<min(reference.count, decoded.count - lag) { dot += Double(reference[i]) * Double(decoded[i + lag]) }
        if dot > best {
            best = dot
            bestLag = lag
        }
    }
    return bestLag
}

/// Signal-to-noise ratio in dB of `decoded` against `reference`, over all channels, from frame `skip` on.
func snr(_ reference: [[Float]], _ decoded: [[Float]], skip: Int = 2048) -> Double {
    var signal = 0.0
    var noise = 0.0
    for c in 0..<reference.count {
        let n = min(reference[c].count, decoded[c].count)
        for i in skip..<n {
            let x = Double(reference[c][i])
            let e = x - Double(decoded[c][i])
            signal += x * x
            noise += e * e
        }
    }
    return 10 * log10(signal / noise)
}

/// The `elst` box of an MP4: (segment duration in movie time scale, media time in media time scale).
func editList(_ path: String) throws -> (duration: Int, mediaTime: Int)? {
    let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    let tag = Array("elst".utf8)
    guard let at = (0..<(bytes.count - 4)).first(where: { Array(bytes[$0..<$0 + 4]) == tag }) else { return nil }
    func u32(_ o: Int) -> Int { Int(bytes[o]) << 24 | Int(bytes[o + 1]) << 16 | Int(bytes[o + 2]) << 8 | Int(bytes[o + 3]) }
    // version/flags (4), entry count (4), then version 0 entries: segment duration (4), media time (4), rate (4).
    return (u32(at + 12), u32(at + 16))
}

@Suite struct AACFileTests {
    /// ADTS, FLV and M4A: ffprobe sees AAC-LC at the rate and channel count encoded, ffmpeg decodes each without
    /// a word of complaint, and the decoded audio lines up with the input at lag 0 once the priming is removed
    /// (by hand for ADTS and FLV, which cannot signal it; by the edit list for M4A).
    @Test(arguments: [("aac", 48_000.0, 2), ("flv", 48_000, 2), ("m4a", 48_000, 2), ("flv", 44_100, 1), ("m4a", 22_050, 1)])
    func everyContainerDecodesAndLinesUp(container: String, rate: Double, channels: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let signal = Array(SignalCheck.testSignal(seconds: 2.5, sampleRate: rate).prefix(channels))
        let path = dir.file("out.\(container)")
        let (encoder, packets) = try encodeFile(signal, sampleRate: rate, bitRate: channels * 96_000, to: path)
        let info = try FFmpeg.probe(path)
        #expect(info["codec_name"] == "aac" && info["profile"] == "LC", "\(info)")
        #expect(info["sample_rate"] == "\(Int(rate))" && info["channels"] == "\(channels)", "\(info)")
        let check = try runProcess("ffmpeg", ["-v", "error", "-i", path, "-f", "null", "-"])
        #expect(check.status == 0 && check.stderr.isEmpty, "ffmpeg: \(check.stderr)")
        let decoded = try FFmpeg.decode(path, channels: channels)
        let trimmed = container == "m4a" ? decoded : decoded.map { Array($0.dropFirst(encoder.priming)) }
        #expect(trimmed[0].count >= signal[0].count, "\(trimmed[0].count) < \(signal[0].count)")
        // Channel 0 is the chirp, which pins the lag down; the sine on channel 1 is checked by correlation at lag 0.
        #expect(SignalCheck.lag(of: signal[0], in: trimmed[0], window: Int(rate / 5), search: 2048).map { abs($0) <= 1 } == true)
        #expect(bestLag(of: signal[0], in: trimmed[0]) == 0)
        for c in 0..<channels {
            let match = SignalCheck.compare(signal[c], trimmed[c], lag: 0)
            #expect(match.correlation > 0.99 && abs(match.levelDB) < 0.5, "channel \(c): \(match)")
        }
        #expect(packets.count == (signal[0].count + encoder.priming + 1023) / 1024)
    }

    /// An M4A says exactly how long the input was: an edit list that starts after the 1024 samples of priming and
    /// lasts the input's length, which ffprobe reports to the sample and LiveAudio's decoder delivers to the
    /// sample, for lengths on and off the packet grid. FFmpeg 5.1's own decoder applies the start of the edit
    /// list but not its end, so it gives the whole last packet: the input plus under one packet, aligned.
    @Test(arguments: [480_000, 100_000, 1000])
    func m4aDecodesToTheInputsLength(frames: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let signal = SignalCheck.testSignal(seconds: Double(frames) / 48_000)
        let path = dir.file("out.m4a")
        _ = try encodeFile(signal, to: path)
        #expect(try FFmpeg.probe(path)["duration_ts"] == "\(frames)")
        let edit = try #require(try editList(path))
        #expect(edit.mediaTime == 1024)
        // The movie time scale is the sample rate, so the segment lasts the input's length to the sample.
        #expect(edit.duration == frames, "segment duration \(edit.duration)")
        let decoder = try AudioFileDecoder(path: path)
        #expect(decoder.frameCount == Int64(frames) && decoder.isFrameCountExact)
        let all = PCMBuffer(channelCount: 2, capacity: frames + 4096)
        let got = try decoder.read(into: all.view(frames: all.capacity))
        #expect(got == frames)
        let reference = try FFmpeg.decode(path, channels: 2)
        #expect(reference[0].count >= frames && reference[0].count < frames + 1024)
        // LiveAudio's decoder gives what FFmpeg's does, trimmed at the stated end.
        let ours = Array(all.view(frames: got)[1])
        let n = min(got, reference[1].count)
        let diff = (0..<n).map { abs(ours[$0] - reference[1][$0]) }.max() ?? 0
        #expect(diff < 1e-6)
        if frames >= 48_000 {
            #expect(bestLag(of: signal[0], in: reference[0]) == 0)
        }
    }

    /// FLV packet n sits at exactly round(n × 1024 × 1000 / rate) ms, as ffprobe reads the tags, at rates where
    /// the packet duration is a whole number of milliseconds and where it is not.
    @Test(arguments: [48_000.0, 44_100, 22_050])
    func flvTimestampsAreRoundedMilliseconds(rate: Double) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = dir.file("out.flv")
        let (_, packets) = try encodeFile(SignalCheck.testSignal(seconds: 3, sampleRate: rate), sampleRate: rate, to: path)
        let r = try runProcess(
            "ffprobe", ["-v", "error", "-select_streams", "a", "-show_entries", "packet=pts", "-of", "csv=p=0", path])
        #expect(r.status == 0, "\(r.stderr)")
        let times = r.stdout.split(separator: "\n").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        #expect(times.count == packets.count)
        for (n, t) in times.enumerated() {
            let expected = Int((Double(n) * 1024 * 1000 / rate).rounded())
            if t != expected {
                Issue.record("packet \(n) at \(t) ms, expected \(expected)")
                break
            }
        }
        #expect(packets.map(\.streamMilliseconds) == times.map(Int64.init))
    }

    /// The same input through `ffmpeg -c:a aac -b:a 128k` and through LiveAudio at 128k: the SNR against the
    /// input agrees within 0.5 dB (both decoded by FFmpeg, priming removed from both).
    @Test func qualityMatchesFFmpegsOwnEncoder() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Music-like: the chirp and sine plus a quieter noise bed, so the encoder has real work to do.
        var signal = SignalCheck.testSignal(seconds: 6)
        // Seeded: the same noise every run, so a change in the SNR is the encoder's, not the input's.
        var generator = SplitMix64(seed: 168)
        for c in 0..<2 {
            for i in 0..<signal[c].count { signal[c][i] += Float.random(in: -0.05...0.05, using: &generator) }
        }
        try writeWAV(dir.file("in.wav"), channels: signal)
        _ = try encodeFile(signal, to: dir.file("ours.aac"))
        try FFmpeg.run(["-i", dir.file("in.wav"), "-c:a", "aac", "-b:a", "128k", dir.file("theirs.aac")])
        let ours = try FFmpeg.decode(dir.file("ours.aac"), channels: 2).map { Array($0.dropFirst(1024)) }
        let theirs = try FFmpeg.decode(dir.file("theirs.aac"), channels: 2).map { Array($0.dropFirst(1024)) }
        let a = snr(signal, ours)
        let b = snr(signal, theirs)
        #expect(a > 15 && b > 15, "SNR ours \(a) dB, ffmpeg \(b) dB")
        #expect(abs(a - b) <= 0.5, "SNR ours \(a) dB, ffmpeg \(b) dB")
    }
}
