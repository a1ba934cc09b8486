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

/// Sends `packets` at their real-time pace (or at once when `realTime` is false), starting `offset` ms in. The
/// pacing runs on a thread of its own: a busy cooperative pool would otherwise send in bursts that overflow the
/// queue.
func publish(_ packets: ArraySlice<AACPacket>, to publisher: RTMPPublisher, offset: Int64 = 0, realTime: Bool = true) async {
    let packets = Array(packets)
    _ = try? await offPool {
        let start = monotonicNanoseconds()
        let first = packets.first?.streamMilliseconds ?? 0
        for p in packets {
            if realTime {
                let due = start + UInt64(max(0, p.streamMilliseconds - first)) * 1_000_000
                let now = monotonicNanoseconds()
                if due > now { usleep(UInt32((due - now) / 1000)) }
            }
            publisher.send(aacFrame: p.data, timestamp: p.streamMilliseconds + offset, captureTime: monotonicNanoseconds())
        }
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

extension PublisherTests {
    @Test("ffmpeg plays the stream live while it is being published")
    func ffmpegPlaysLive() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let input = try EncodedSignal(seconds: 8)
        // The sending task runs on the cooperative pool, which a full parallel run can hold for seconds: a long
        // queue keeps that from dropping frames here (drops are tested where they are the point).
        var configuration = RTMPPublisher.Configuration()
        configuration.queueMilliseconds = 60_000
        let publisher = try RTMPPublisher(
            url: RTMPURL(server.url("live-play")), stream: input.description, configuration: configuration)
        try await publisher.start()
        // The player joins half a second in. It is spawned by the thread that paces the frames, so a busy
        // cooperative pool cannot make it join after the stream has ended.
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let url = server.url("live-play")
        let packets = input.packets
        let player = try await offPool { () -> ChildProcess in
            let start = monotonicNanoseconds()
            var player: ChildProcess?
            for (n, p) in packets.enumerated() {
                let due = start + UInt64(p.streamMilliseconds) * 1_000_000
                let now = monotonicNanoseconds()
                if due > now { usleep(UInt32((due - now) / 1000)) }
                publisher.send(aacFrame: p.data, timestamp: p.streamMilliseconds)
                if n == 25 {
                    player = try ChildProcess(
                        "ffmpeg",
                        // A short probe: FFmpeg's default analyses a live stream for about 5 s first.
                        ["-hide_banner", "-loglevel", "error", "-rw_timeout", "5000000", "-analyzeduration", "200000",
                         "-probesize", "4096", "-i", url, "-t", "2", "-y", dir.file("played.wav")],
                        log: dir.file("player.log"))
                }
            }
            return player!
        }
        let status = await player.finished(timeout: 20)
        await publisher.stop()
        let played = (status: status, stderr: player.output)
        #expect(played.status == 0, "ffmpeg: \(played.stderr)")
        let decoded = try FFmpeg.decode(dir.file("played.wav"), channels: 2)
        #expect(decoded[0].count >= 90_000, "played \(decoded[0].count) frames")
        let left = SignalCheck.toneAmplitude(decoded[0][10_000..<58_000], frequency: 440)
        let right = SignalCheck.toneAmplitude(decoded[1][10_000..<58_000], frequency: 660)
        #expect(abs(left - 0.25) < 0.03 && abs(right - 0.25) < 0.03, "440 Hz \(left), 660 Hz \(right)")
        #expect(publisher.currentStatistics.droppedPackets == 0)
    }

    @Test("The server killed mid-stream and restarted: the publisher reconnects by itself, the second recording continues the first's timestamps, and what was dropped is counted")
    func reconnectsAfterServerRestart() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let input = try EncodedSignal(seconds: 8)
        var configuration = RTMPPublisher.Configuration()
        configuration.initialReconnectDelay = 0.2
        configuration.maximumReconnectDelay = 0.5
        configuration.queueMilliseconds = 1000
        configuration.statisticsInterval = 0.2
        let publisher = try RTMPPublisher(
            url: RTMPURL(server.url("restart")), stream: input.description, configuration: configuration)
        let states = Task {
            var seen: [RTMPPublisher.State] = []
            for await s in publisher.statistics where seen.last != s.state { seen.append(s.state) }
            return seen
        }
        try await publisher.start()
        // The frames in real time, and the outage timed against them, on a thread of their own (a busy cooperative
        // pool would shift the outage): killed 2 s in, restarted 2 s later — longer than the 1 s queue, so some
        // frames must be dropped.
        let packets = input.packets
        try await offPool {
            let start = monotonicNanoseconds()
            var killed = false
            var restarted = false
            for p in packets {
                let due = start + UInt64(p.streamMilliseconds) * 1_000_000
                let now = monotonicNanoseconds()
                if due > now { usleep(UInt32((due - now) / 1000)) }
                if !killed, p.streamMilliseconds >= 2_000 {
                    server.kill()
                    killed = true
                }
                if !restarted, p.streamMilliseconds >= 4_000 {
                    try server.start()
                    restarted = true
                }
                publisher.send(aacFrame: p.data, timestamp: p.streamMilliseconds, captureTime: monotonicNanoseconds())
            }
            usleep(300_000)
        }
        await publisher.stop()
        let stats = publisher.currentStatistics
        let seen = await states.value
        server.stop()

        #expect(stats.reconnects >= 1, "\(stats)")
        #expect(seen.contains(.reconnecting) && seen.last == .stopped, "states \(seen)")
        #expect(stats.droppedPackets > 0, "\(stats)")
        #expect(stats.packetsSent + stats.droppedPackets == input.packets.count, "\(stats)")
        let first = server.recordedFiles(start: 1)
        let second = server.recordedFiles(start: 2)
        try #require(first.count == 1 && second.count == 1, "recordings \(first) \(second); log \(server.log)")
        let before = try packetTimes(first[0])
        let after = try packetTimes(second[0])
        try #require(!before.isEmpty && !after.isEmpty)
        // No reset to zero: the second recording starts after the first ended, where the input's clock was,
        // about 4 s in; the gap is what was dropped while the server was down.
        #expect(after.first! > before.last!, "first ends at \(before.last!) ms, second starts at \(after.first!) ms")
        #expect(after.first! >= 3_000 && after.first! <= 5_500, "second recording starts at \(after.first!) ms")
        #expect(zip(after, after.dropFirst()).allSatisfy { $0 < $1 }, "timestamps go forward")
        #expect(abs(after.last! - Double(input.packets.last!.streamMilliseconds)) < 1.01)
        // Every packet recorded is one the input had, at its own time.
        let sent = Set(input.packets.map { Double($0.streamMilliseconds) })
        let strangers = (before + after).filter { !sent.contains($0) }
        #expect(strangers.isEmpty, "recorded at times never sent: \(strangers.prefix(5))")
        // Both recordings decode.
        for file in first + second {
            let r = try runProcess("ffmpeg", ["-v", "error", "-i", file, "-f", "null", "-"])
            #expect(r.status == 0 && r.stderr.isEmpty, "\(file): \(r.stderr)")
        }
    }

    @Test("Timestamps past 0xFFFFFF ms (4.66 hours) travel as extended timestamps and are recorded as sent")
    func extendedTimestamps() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let input = try EncodedSignal(seconds: 2)
        var configuration = RTMPPublisher.Configuration()
        configuration.queueMilliseconds = 60_000
        let publisher = try RTMPPublisher(
            url: RTMPURL(server.url("long")), stream: input.description, configuration: configuration)
        let offset: Int64 = 0xFF_FFFF - 1000
        try await publisher.start()
        await publish(input.packets[...], to: publisher, offset: offset, realTime: false)
        await publisher.stop()
        server.stop()
        let files = server.recordedFiles(start: 1)
        try #require(files.count == 1)
        let flv = try FLVContents(path: files[0])
        let raw = flv.tags.filter { $0.type == .audio && $0.data.count > 1 && $0.data[1] == FLVAudio.raw }
        #expect(raw.map { Int64($0.timestamp) } == input.packets.map { $0.streamMilliseconds + offset })
        #expect(raw.contains { $0.timestamp > 0xFF_FFFF })
    }

    @Test("Statistics arrive as an AsyncStream: state, packets, bytes, bit rate, queue, latency")
    func statisticsStream() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let input = try EncodedSignal(seconds: 3)
        var configuration = RTMPPublisher.Configuration()
        configuration.statisticsInterval = 0.5
        let publisher = try RTMPPublisher(url: RTMPURL(server.url("stats")), stream: input.description, configuration: configuration)
        let collected = Task {
            var all: [RTMPStatistics] = []
            for await s in publisher.statistics { all.append(s) }
            return all
        }
        try await publisher.start()
        await publish(input.packets[...], to: publisher)
        await publisher.stop()
        let all = await collected.value
        #expect(all.first?.state == .connecting)
        #expect(all.contains { $0.state == .publishing })
        #expect(all.last?.state == .stopped)
        #expect(all.last?.packetsSent == input.packets.count)
        // Bit rate while publishing: the packets' bytes over their duration (about 128 kbit/s), within 25 %.
        let rates = all.filter { $0.state == .publishing && $0.packetsSent > 20 }.map(\.bitRate)
        let expected = Double(input.packets.reduce(0) { $0 + $1.data.count + 2 }) * 8 / 3
        #expect(rates.contains { abs($0 - expected) < expected * 0.25 }, "rates \(rates), expected \(expected)")
        #expect(all.allSatisfy { $0.queuedMilliseconds <= configuration.queueMilliseconds })
        let latency = try #require(all.last?.latency)
        #expect(latency.p50 >= 0 && latency.p99 < 100, "\(latency)")
        #expect(all.last!.bytesSent > Int64(input.packets.reduce(0) { $0 + $1.data.count }))
    }

    @Test("A server that stops reading without closing: the stall timeout drops the connection, and the publisher reconnects once the server runs again")
    func stalledServer() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let input = try EncodedSignal(seconds: 1)
        var configuration = RTMPPublisher.Configuration()
        configuration.stallTimeout = 1
        configuration.responseTimeout = 2
        configuration.initialReconnectDelay = 0.2
        configuration.maximumReconnectDelay = 0.5
        let publisher = try RTMPPublisher(url: RTMPURL(server.url("stall")), stream: input.description, configuration: configuration)
        try await publisher.start()
        server.pause()
        // Frames far faster than real time fill the socket buffers in a moment; then writes wait.
        let (state, error, seconds) = try await offPool { () -> (RTMPPublisher.State, AudioError?, Double) in
            let began = monotonicNanoseconds()
            var timestamp: Int64 = 0
            while monotonicNanoseconds() - began < 30_000_000_000 {
                for p in input.packets {
                    publisher.send(aacFrame: p.data, timestamp: timestamp)
                    timestamp += 21
                }
                let s = publisher.currentStatistics
                if s.state == .reconnecting { return (s.state, s.lastError, Double(monotonicNanoseconds() - began) / 1e9) }
                usleep(1000)
            }
            return (publisher.currentStatistics.state, publisher.currentStatistics.lastError, 30)
        }
        #expect(state == .reconnecting, "\(error.map { "\($0)" } ?? "no error")")
        #expect(error?.code == .connectionLost)
        #expect(error?.message.contains("took no data for 1 s") == true, "\(error.map { "\($0)" } ?? "")")
        #expect(seconds < 15, "noticed after \(seconds) s")
        server.resume()
        let published = try await offPool { () -> Bool in
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline {
                if publisher.currentStatistics.state == .publishing { return true }
                usleep(20_000)
            }
            return false
        }
        let now = publisher.currentStatistics
        #expect(published, "\(now); last error: \(now.lastError.map { "\($0)" } ?? "none"); server log: \(server.log.suffix(3000))")
        #expect(publisher.currentStatistics.reconnects >= 1)
        await publisher.stop()
    }

    @Test("The publisher keeps sending while every thread of Swift's cooperative pool is blocked")
    func sendsWhileThePoolIsBlocked() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let input = try EncodedSignal(seconds: 3)
        let publisher = try RTMPPublisher(url: RTMPURL(server.url("blocked")), stream: input.description)
        try await publisher.start()

        // One blocking task per pool thread; a control task that counts ticks on the pool shows it was blocked.
        let width = ProcessInfo.processInfo.activeProcessorCount
        let blocked = LockedCounter()
        let release = LockedFlag()
        let ticks = LockedCounter()
        let control = Task {
            while !release.isSet {
                ticks.increment()
                try? await Task.sleep(nanoseconds: 10_000_000)
            }
        }
        let blockers = (0..<width).map { _ in
            Task {
                blocked.increment()
                let until = Date().addingTimeInterval(30)
                while !release.isSet, Date() < until { usleep(1000) }
            }
        }
        // From a thread of its own: once the pool is blocked, three seconds of frames in real time, then how many
        // were sent, and how often the control task ran meanwhile.
        let (sent, controlTicks) = try await offPool { () -> (Int, Int) in
            while blocked.value < width { usleep(1000) }
            let ticksBefore = ticks.value
            let start = monotonicNanoseconds()
            for p in input.packets {
                let due = start + UInt64(p.streamMilliseconds) * 1_000_000
                let now = monotonicNanoseconds()
                if due > now { usleep(UInt32((due - now) / 1000)) }
                publisher.send(aacFrame: p.data, timestamp: p.streamMilliseconds, captureTime: monotonicNanoseconds())
            }
            usleep(200_000)
            let result = (publisher.currentStatistics.packetsSent, ticks.value - ticksBefore)
            release.set()
            return result
        }
        for b in blockers { await b.value }
        await control.value
        await publisher.stop()
        // The pool ran nothing (a tick or two may have been under way), and every frame but the last few went out.
        #expect(controlTicks <= 2, "the pool was not blocked: \(controlTicks) ticks")
        #expect(sent >= input.packets.count - 5, "\(sent) of \(input.packets.count) sent while the pool was blocked")
        #expect(publisher.currentStatistics.packetsSent == input.packets.count)
    }
}
