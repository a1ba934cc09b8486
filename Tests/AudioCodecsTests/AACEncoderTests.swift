import AudioCodecs
import Foundation
import LiveAudio
import Testing
import TestSupport

/// Interleaved Int16 bytes of `channels` (rounded, as a capture callback delivers them).
func int16Interleaved(_ channels: [[Float]]) -> [Int16] {
    let frames = channels[0].count
    var out = [Int16](repeating: 0, count: frames * channels.count)
    for i in 0..<frames {
        for c in 0..<channels.count { out[i * channels.count + c] = Int16((channels[c][i] * 32767).rounded()) }
    }
    return out
}

/// Encodes `samples` (interleaved Int16) cut into `chunk`-frame pieces, then flushes.
func encodeInt16(_ samples: [Int16], channels: Int, chunk: Int, start: Int64? = nil) throws -> (AACEncoder, [AACPacket]) {
    let format = try StreamFormat(sampleRate: 48_000, channelCount: channels, sampleType: .int16, interleaved: true)
    let encoder = try AACEncoder(settings: AACEncoderSettings(channelCount: channels, bitRate: 128_000), inputFormat: format)
    var packets: [AACPacket] = []
    var copy = samples
    let frames = samples.count / channels
    try copy.withUnsafeMutableBytes { raw in
        var done = 0
        while done < frames {
            let n = min(chunk, frames - done)
            let view = RawBufferView(
                format: format, base: raw.baseAddress! + done * format.bytesPerFrame, planeStride: raw.count, frameCount: n)
            packets += try encoder.encode(view, sampleTime: done == 0 ? start : nil)
            done += n
        }
    }
    packets += try encoder.flush()
    return (encoder, packets)
}

func expectError(_ code: AudioError.Code, containing text: String, _ body: () throws -> Void) {
    do {
        try body()
        Issue.record("no error; expected \(code) mentioning '\(text)'")
    } catch let error as AudioError {
        #expect(error.code == code, "\(error)")
        #expect(error.message.contains(text), "\(error.message)")
    } catch {
        Issue.record("not an AudioError: \(error)")
    }
}

@Suite struct AACEncoderTests {
    /// What cannot be encoded is refused with a message that says what can.
    @Test func settingsAreValidated() {
        expectError(.invalidParameter, containing: "AAC-LC only") { _ = try AACProfile(parsing: "he-aac") }
        expectError(.invalidParameter, containing: "AAC-LC only") { _ = try AACProfile(parsing: "HE-AAC-v2") }
        expectError(.invalidParameter, containing: "unknown AAC profile") { _ = try AACProfile(parsing: "mp3") }
        #expect((try? AACProfile(parsing: "AAC-LC")) == .lc)
        expectError(.unsupportedSampleRate, containing: "44100") { _ = try AACEncoder(settings: .init(sampleRate: 50_000)) }
        expectError(.invalidFormat, containing: "1 to 8 channels") { _ = try AACEncoder(settings: .init(channelCount: 0)) }
        expectError(.invalidFormat, containing: "1 to 8 channels") { _ = try AACEncoder(settings: .init(channelCount: 9)) }
        expectError(.invalidParameter, containing: "32k…320k") { _ = try AACEncoder(settings: .init(bitRate: 16_000)) }
        expectError(.invalidParameter, containing: "32k…320k") { _ = try AACEncoder(settings: .init(bitRate: 400_000)) }
        // 6144 bits per channel per 1024 samples: 48k mono at 8 kHz carries at most 48k.
        expectError(.invalidParameter, containing: "at most 48k") {
            _ = try AACEncoder(settings: .init(sampleRate: 8000, channelCount: 1, bitRate: 64_000))
        }
        expectError(.formatMismatch, containing: "resample or remix") {
            _ = try AACEncoder(settings: .init(channelCount: 2), inputFormat: try .graph(sampleRate: 44_100, channelCount: 2))
        }
    }

    /// What the encoder reports: 1024-frame packets, 1024 priming, an AudioSpecificConfig that says AAC-LC at the
    /// rate and channel count asked for (ISO 14496-3: object type 2, index 3 for 48 kHz, configuration 2 → 11 90),
    /// and the per-channel packet limit.
    @Test func reportsPrimingAndConfig() throws {
        let encoder = try AACEncoder(settings: AACEncoderSettings(sampleRate: 48_000, channelCount: 2))
        #expect(encoder.framesPerPacket == 1024 && encoder.priming == 1024)
        #expect(Array(encoder.audioSpecificConfig.prefix(2)) == [0x11, 0x90])
        let asc = try AudioSpecificConfig(parsing: encoder.audioSpecificConfig)
        #expect(asc.objectType == 2 && asc.sampleRate == 48_000 && asc.channelCount == 2)
        #expect(try asc.encoded() == [0x11, 0x90])
        #expect(encoder.maximumPacketSize == 1536)
        let mono = try AACEncoder(settings: AACEncoderSettings(sampleRate: 44_100, channelCount: 1))
        #expect(try AudioSpecificConfig(parsing: mono.audioSpecificConfig) == AudioSpecificConfig(objectType: 2, sampleRate: 44_100, channelConfiguration: 1))
        #expect(mono.settings.bitRate == 64_000)
        // The default bit rate stays within what the rate carries: 8 kHz mono carries at most 48k.
        #expect(try AACEncoder(settings: AACEncoderSettings(sampleRate: 8000, channelCount: 1)).settings.bitRate == 48_000)
    }

    /// The same input in chunks of 1, 441, 22050 frames or all at once gives the same packets, byte for byte and
    /// time for time.
    @Test func chunkSizeDoesNotChangeThePackets() throws {
        let samples = int16Interleaved(SignalCheck.testSignal(seconds: 1))
        let (_, whole) = try encodeInt16(samples, channels: 2, chunk: 48_000)
        #expect(whole.count == 48)  // ceil((48000 + 1024) / 1024)
        for chunk in [1, 441, 22_050] {
            let (_, cut) = try encodeInt16(samples, channels: 2, chunk: chunk)
            #expect(cut == whole, "chunks of \(chunk)")
        }
    }

    /// Packet n starts at start + n × 1024 − 1024 (the priming); 480000 frames make 470 packets, the last with
    /// 256 frames of padding (470 × 1024 = 1024 + 480000 + 256), so it stands for 768.
    @Test func timestampsPrimingAndPadding() throws {
        let tone = (0..<480_000).map { Float(0.25 * sin(Double($0) * 0.05)) }
        let (encoder, packets) = try encodeInt16(int16Interleaved([tone]), channels: 1, chunk: 4096, start: 96_000)
        #expect(packets.count == 470)
        for (n, p) in packets.enumerated() {
            #expect(p.index == n && p.sampleTime == 96_000 + Int64(n) * 1024 - 1024)
            #expect(p.data.count <= encoder.maximumPacketSize && !p.data.isEmpty)
        }
        #expect(encoder.padding == 256 && packets.last?.frames == 768 && packets.first?.frames == 1024)
        #expect(packets[1].milliseconds == 2000 && packets[3].streamMilliseconds == 64)  // round(3 × 1024 / 48)
        #expect(try encoder.flush().isEmpty)
        expectError(.invalidState, containing: "flushed") { _ = try encoder.encode(PCMBuffer(channelCount: 1, capacity: 1).view(frames: 1)) }
    }

    /// A chunk that starts later than the last one ended leaves a gap, filled with silence so that packets stay
    /// on the input's clock; one that starts earlier is refused.
    @Test func gapsAreFilledAndTimeNeverGoesBack() throws {
        let encoder = try AACEncoder(settings: AACEncoderSettings(channelCount: 1))
        let block = PCMBuffer(channelCount: 1, capacity: 1000)
        var packets = try encoder.encode(block.view(frames: 1000), sampleTime: 10_000)
        packets += try encoder.encode(block.view(frames: 1000), sampleTime: 12_048)
        #expect(encoder.gapFrames == 1048 && encoder.inputFrames == 3048)
        expectError(.invalidParameter, containing: "back in time") { _ = try encoder.encode(block.view(frames: 10), sampleTime: 12_000) }
        packets += try encoder.flush()
        let first = try #require(packets.first)
        let primed: Int64 = 10_000 - 1024
        #expect(first.sampleTime == primed)
        #expect(packets.count == 4)  // ceil((1024 + 3048) / 1024)
        // Float32 buffers into an encoder whose client format is Int16: the same rule.
        let int16 = try AACEncoder(
            settings: AACEncoderSettings(channelCount: 1),
            inputFormat: StreamFormat(sampleRate: 48_000, channelCount: 1, sampleType: .int16, interleaved: true))
        _ = try int16.encode(block.view(frames: 1000), sampleTime: 0)
        _ = try int16.encode(block.view(frames: 1000), sampleTime: 5000)
        #expect(int16.gapFrames == 4000 && int16.inputFrames == 6000)
        expectError(.invalidParameter, containing: "back in time") { _ = try int16.encode(block.view(frames: 1), sampleTime: 10) }
    }

    /// An ADTS file of the encoder's packets: FFmpeg reads it as AAC-LC, 48 kHz stereo, decodes it without an
    /// error, and after dropping the 1024 priming samples the decoded chirp lines up with the input at lag 0.
    @Test func adtsFileDecodesAndLinesUpAfterThePriming() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let signal = SignalCheck.testSignal(seconds: 2)
        let encoder = try AACEncoder(settings: AACEncoderSettings(channelCount: 2, bitRate: 192_000))
        let writer = try ADTSFileWriter(path: dir.file("out.aac"), sampleRate: 48_000, channelCount: 2)
        let input = PCMBuffer(channels: signal)
        var packets = try encoder.encode(input.view(frames: signal[0].count))
        packets += try encoder.flush()
        for p in packets { try writer.write(p.data) }
        writer.finish()
        let info = try FFmpeg.probe(dir.file("out.aac"))
        #expect(info["codec_name"] == "aac" && info["profile"] == "LC", "\(info)")
        #expect(info["sample_rate"] == "48000" && info["channels"] == "2", "\(info)")
        let decoded = try FFmpeg.decode(dir.file("out.aac"), channels: 2)
        #expect(decoded[0].count == packets.count * 1024)
        let trimmed = Array(decoded[0].dropFirst(encoder.priming))
        #expect(SignalCheck.lag(of: signal[0], in: trimmed) == 0)
        let match = SignalCheck.compare(signal[0], trimmed, lag: 0)
        #expect(match.correlation > 0.99 && abs(match.levelDB) < 0.5, "\(match)")
    }
}

@Suite struct ContainerParserTests {
    /// Every header the writer makes parses back to itself; every prefix shorter than 7 bytes, a lost sync word,
    /// a reserved rate and an impossible length are typed errors.
    @Test func adtsHeaderRoundTripAndCorruptInput() throws {
        for rate in AACSamplingFrequency.rates {
            for channels in 1...7 {
                let header = ADTSHeader(sampleRate: rate, channelConfiguration: channels, payloadLength: 371)
                let bytes = try header.encoded()
                #expect(bytes.count == 7)
                #expect(try ADTSHeader(parsing: bytes) == header)
                for cut in 0..<7 {
                    #expect(throws: AudioError.self) { try ADTSHeader(parsing: Array(bytes.prefix(cut))) }
                }
            }
        }
        var bytes = try ADTSHeader(sampleRate: 48_000, channelConfiguration: 2, payloadLength: 100).encoded()
        bytes[0] = 0xFE
        expectError(.corruptFile, containing: "sync") { _ = try ADTSHeader(parsing: bytes) }
        bytes[0] = 0xFF
        bytes[2] = bytes[2] | 0x3C  // index 15
        expectError(.corruptFile, containing: "reserved") { _ = try ADTSHeader(parsing: bytes) }
        let short: [UInt8] = [0xFF, 0xF1, 0x4C, 0x80, 0x00, 0x1F, 0xFC]  // length 0
        expectError(.corruptFile, containing: "shorter than its header") { _ = try ADTSHeader(parsing: short) }
        expectError(.invalidFormat, containing: "8184") {
            _ = try ADTSHeader(sampleRate: 48_000, channelConfiguration: 2, payloadLength: 9000).encoded()
        }
        // Random bytes: an error or a header, never a crash.
        var generator = SplitMix64(seed: 191)  // seeded: a failure can be replayed
        for _ in 0..<5000 {
            let noise = (0..<7).map { _ in UInt8.random(in: 0...255, using: &generator) }
            _ = try? ADTSHeader(parsing: [0xFF, 0xF1] + noise)
        }
    }

    /// AudioSpecificConfig: the explicit-rate and escape forms parse; truncated and reserved ones are errors.
    @Test func audioSpecificConfigParsing() throws {
        #expect(try AudioSpecificConfig(parsing: [0x12, 0x10]) == AudioSpecificConfig(objectType: 2, sampleRate: 44_100, channelConfiguration: 2))
        // Index 15: a 24-bit rate follows (2 · 5 bits + 4 + 24 + 4 = 37 bits, 5 bytes): object type 2, 50000 Hz, mono.
        let explicit: [UInt8] = [0x17, 0x80, 0x61, 0xA8, 0x08]
        #expect(try AudioSpecificConfig(parsing: explicit) == AudioSpecificConfig(objectType: 2, sampleRate: 50_000, channelConfiguration: 1))
        expectError(.corruptFile, containing: "at least 2 bytes") { _ = try AudioSpecificConfig(parsing: [0x12]) }
        expectError(.corruptFile, containing: "truncated") { _ = try AudioSpecificConfig(parsing: [0x17, 0x80]) }
        expectError(.corruptFile, containing: "reserved") { _ = try AudioSpecificConfig(parsing: [0x16, 0x90]) }  // index 13
        expectError(.corruptFile, containing: "object type 0") { _ = try AudioSpecificConfig(parsing: [0x01, 0x90]) }
        expectError(.unsupportedSampleRate, containing: "50") {
            _ = try AudioSpecificConfig(objectType: 2, sampleRate: 50_000, channelConfiguration: 1).encoded()
        }
        for a in 0...255 {
            for b in stride(from: 0, through: 255, by: 5) { _ = try? AudioSpecificConfig(parsing: [UInt8(a), UInt8(b)]) }
        }
    }
}
