import Foundation
import LiveAudio
import Testing
import TestSupport

/// A test signal and its AAC packets: a 440 Hz tone in the left channel and 660 Hz in the right, with a
/// 50 ms click every second so that alignment can be measured.
struct EncodedSignal: Sendable {
    let signal: [[Float]]
    let packets: [AACPacket]
    let description: AACStreamDescription
    let priming: Int

    init(seconds: Double, sampleRate: Double = 48_000, channels: Int = 2) throws {
        let n = Int(seconds * sampleRate)
        signal = (0..<channels).map { c in
            let f = c == 0 ? 440.0 : 660.0
            return (0..<n).map { i in
                let t = Double(i) / sampleRate
                let burst = i % Int(sampleRate) < Int(sampleRate / 20) ? 0.3 * sin(2 * .pi * 1500 * t) : 0
                return Float(0.25 * sin(2 * .pi * f * t) + burst)
            }
        }
        let encoder = try AACEncoder(settings: AACEncoderSettings(sampleRate: sampleRate, channelCount: channels, bitRate: 128_000))
        let buffer = PCMBuffer(channels: signal)
        var packets = try withExtendedLifetime(buffer) { try encoder.encode(buffer.view(frames: n)) }
        packets += try encoder.flush()
        self.packets = packets
        priming = encoder.priming
        description = AACStreamDescription(
            sampleRate: sampleRate, channelCount: channels, bitRate: 128_000, audioSpecificConfig: encoder.audioSpecificConfig)
    }
}

/// Sends `packets` at their real-time pace (or at once when `realTime` is false), starting `offset` ms in.
func publish(_ packets: ArraySlice<AACPacket>, to publisher: RTMPPublisher, offset: Int64 = 0, realTime: Bool = true) async {
    let start = monotonicNanoseconds()
    let first = packets.first?.streamMilliseconds ?? 0
    for p in packets {
        if realTime {
            let due = start + UInt64(max(0, p.streamMilliseconds - first)) * 1_000_000
            let now = monotonicNanoseconds()
            if due > now { try? await Task.sleep(nanoseconds: due - now) }
        }
        publisher.send(aacFrame: p.data, timestamp: p.streamMilliseconds + offset, captureTime: monotonicNanoseconds())
    }
}

/// ffprobe's audio packet timestamps (ms) and the stream's duration.
func packetTimes(_ path: String) throws -> [Double] {
    let r = try runProcess(
        "ffprobe", ["-v", "error", "-select_streams", "a:0", "-show_entries", "packet=pts_time", "-of", "csv=p=0", path])
    guard r.status == 0 else { throw FFmpegError(message: "ffprobe \(path): \(r.stderr)") }
    // A packet with side data (the sequence header nginx repeats) prints it after the time: keep the first field.
    return r.stdout.split(separator: "\n").compactMap { line in
        line.split(separator: ",").first.flatMap { Double($0.trimmingCharacters(in: .whitespaces)) }.map { $0 * 1000 }
    }
}

@Suite("RTMP publisher against nginx-rtmp", .serialized)
struct PublisherTests {
    @Test("A published stream is recorded whole: ffmpeg decodes it, its length is the input's within one packet, and the audio lines up")
    func recordedStreamMatchesInput() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let input = try EncodedSignal(seconds: 4)
        // All at once, so the queue holds the whole input.
        var configuration = RTMPPublisher.Configuration()
        configuration.queueMilliseconds = 60_000
        let publisher = try RTMPPublisher(url: RTMPURL(server.url("tone")), stream: input.description, configuration: configuration)
        try await publisher.start()
        await publish(input.packets[...], to: publisher, realTime: false)
        await publisher.stop()
        let stats = publisher.currentStatistics
        #expect(stats.state == .stopped)
        #expect(stats.packetsSent == input.packets.count)
        #expect(stats.droppedPackets == 0)
        server.stop()

        let files = server.recordedFiles(start: 1)
        try #require(files.count == 1, "recordings: \(files); log: \(server.log)")
        let times = try packetTimes(files[0])
        #expect(times.count == input.packets.count)
        // Packet n sits at round(n·1024000/48000) ms, as sent.
        for (n, t) in times.enumerated().prefix(input.packets.count) {
            #expect(abs(t - Double(input.packets[n].streamMilliseconds)) < 1.01, "packet \(n) at \(t) ms")
        }
        let decoded = try FFmpeg.decode(files[0], channels: 2)
        // Length: within one packet (1024 samples) of the input plus the priming FFmpeg keeps for FLV.
        let expected = input.signal[0].count + input.priming
        #expect(abs(decoded[0].count - expected) <= 1024, "decoded \(decoded[0].count), expected about \(expected)")
        // Content: the clicks line up once the priming is skipped.
        let trimmed = decoded.map { Array($0.dropFirst(input.priming)) }
        let lag = SignalCheck.lag(of: input.signal[0], in: trimmed[0], window: 9600, search: 2400)
        #expect(lag == 0, "lag \(String(describing: lag))")
        // The right channel carries its 660 Hz tone at the amplitude sent (0.25).
        let amplitude = SignalCheck.toneAmplitude(trimmed[1][24_000..<72_000], frequency: 660)
        #expect(abs(amplitude - 0.25) < 0.02, "660 Hz at amplitude \(amplitude) in the right channel")
    }
}
