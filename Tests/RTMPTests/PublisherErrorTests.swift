import Foundation
import LiveAudio
import Testing
import TestSupport

/// Starts a publisher and returns the error `start()` throws (nil if it started), and how long it took.
func startError(_ url: String, configure: (inout RTMPPublisher.Configuration) -> Void = { _ in }) async throws
    -> (AudioError?, Double)
{
    var configuration = RTMPPublisher.Configuration()
    configure(&configuration)
    let input = try EncodedSignal(seconds: 0.1)
    let publisher = try RTMPPublisher(url: RTMPURL(url), stream: input.description, configuration: configuration)
    let began = monotonicNanoseconds()
    do {
        try await publisher.start()
        await publisher.stop()
        return (nil, Double(monotonicNanoseconds() - began) / 1e9)
    } catch {
        #expect(publisher.currentStatistics.state == .failed)
        return (error, Double(monotonicNanoseconds() - began) / 1e9)
    }
}

@Suite("RTMP publisher errors", .serialized)
struct PublisherErrorTests {
    static let secret = "s3cr3t-key-9f2c"

    @Test("A refused connection is a connection error naming the server, at once, without the key")
    func refused() async throws {
        let port = try freeLoopbackPort()
        let (error, _) = try await startError("rtmp://127.0.0.1:\(port)/live/\(Self.secret)")
        let e = try #require(error)
        #expect(e.code == .connectionFailed)
        #expect(e.message.contains("127.0.0.1:\(port)/live") && e.message.lowercased().contains("refused"), "\(e)")
        #expect(!e.message.contains(Self.secret))
        // No hang: refused is reported as refused, not as a timeout. (No bound on the time: in a full parallel
        // run the cooperative pool can hold the task back for a minute.)
    }

    @Test("A host name that does not resolve is a connection error")
    func unknownHost() async throws {
        let (error, _) = try await startError("rtmp://no-such-host.invalid/live/\(Self.secret)")
        let e = try #require(error)
        #expect(e.code == .connectionFailed, "\(e)")
        #expect(!e.message.contains(Self.secret))
    }

    @Test("A server that accepts and never answers times out during the handshake")
    func silentServer() async throws {
        let listener = try SilentListener()
        let (error, seconds) = try await startError("rtmp://127.0.0.1:\(listener.port)/live/\(Self.secret)") {
            $0.responseTimeout = 1
        }
        let e = try #require(error)
        #expect(e.code == .timedOut, "\(e)")
        #expect(e.message.contains("handshake") && !e.message.contains(Self.secret), "\(e)")
        // The 1 s timeout fired (not the 10 s default): never early; late only by the scheduling of a busy run.
        #expect(seconds >= 0.9, "\(seconds) s")
        withExtendedLifetime(listener) {}
    }

    @Test("Publishing where the server forbids it is a rejection")
    func publishForbidden() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let (error, _) = try await startError(server.url(Self.secret, app: "closed"))
        let e = try #require(error)
        #expect(e.code == .rejected, "\(e)")
        #expect(e.message.contains("publish") && !e.message.contains(Self.secret), "\(e)")
    }

    @Test("A stream name already being published is rejected with the server's description (NetStream.Publish.BadName)")
    func badName() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let input = try EncodedSignal(seconds: 0.1)
        let first = try RTMPPublisher(url: RTMPURL(server.url(Self.secret)), stream: input.description)
        try await first.start()
        let (error, _) = try await startError(server.url(Self.secret))
        await first.stop()
        let e = try #require(error)
        #expect(e.code == .rejected, "\(e)")
        #expect(e.message.contains("NetStream.Publish.BadName") && !e.message.contains(Self.secret), "\(e)")
    }

    @Test("An application the server does not have is a rejection, not a hang")
    func unknownApplication() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let (error, _) = try await startError(server.url(Self.secret, app: "nowhere"))
        let e = try #require(error)
        #expect(e.code == .rejected, "\(e)")
        #expect(!e.message.contains(Self.secret))
    }

    @Test("A configuration or stream that cannot be published is an .invalidParameter error at init")
    func badConfigurations() throws {
        let input = try EncodedSignal(seconds: 0.1)
        let url = try RTMPURL("rtmp://127.0.0.1/live/\(Self.secret)")
        let changes: [(String, (inout RTMPPublisher.Configuration) -> Void)] = [
            ("queue", { $0.queueMilliseconds = 0 }), ("chunk size", { $0.chunkSize = 64 }),
            ("chunk size", { $0.chunkSize = 70_000 }), ("connect timeout", { $0.connectTimeout = 0 }),
            ("response timeout", { $0.responseTimeout = -1 }), ("stall timeout", { $0.stallTimeout = 0 }),
            ("statistics interval", { $0.statisticsInterval = 0 }), ("confirmation", { $0.publishConfirmation = 11 }),
            ("status wait", { $0.publishStatusWait = -1 }), ("status wait", { $0.publishStatusWait = .nan }),
            ("status wait", { $0.publishStatusWait = 61 }),
            ("reconnect delays", { $0.initialReconnectDelay = 2; $0.maximumReconnectDelay = 1 }),
        ]
        for (what, change) in changes {
            var configuration = RTMPPublisher.Configuration()
            change(&configuration)
            do {
                _ = try RTMPPublisher(url: url, stream: input.description, configuration: configuration)
                Issue.record("a bad \(what) was accepted")
            } catch {
                #expect(error.code == .invalidParameter && !error.message.contains(Self.secret), "\(what): \(error)")
            }
        }
        // Values that pass a plain "> 0" check but would trap where seconds become nanoseconds: each is refused,
        // and the message names the field.
        let extremes: [(String, (inout RTMPPublisher.Configuration) -> Void)] = [
            ("connectTimeout", { $0.connectTimeout = .infinity }), ("responseTimeout", { $0.responseTimeout = .nan }),
            ("stallTimeout", { $0.stallTimeout = 1e300 }), ("statisticsInterval", { $0.statisticsInterval = .infinity }),
            ("initialReconnectDelay", { $0.initialReconnectDelay = .nan }),
            ("maximumReconnectDelay", { $0.maximumReconnectDelay = .infinity }),
            ("queueMilliseconds", { $0.queueMilliseconds = .max }),
            ("maximumReconnectAttempts", { $0.maximumReconnectAttempts = -1 }),
        ]
        for (field, change) in extremes {
            var configuration = RTMPPublisher.Configuration()
            change(&configuration)
            do {
                _ = try RTMPPublisher(url: url, stream: input.description, configuration: configuration)
                Issue.record("\(field): an extreme value was accepted")
            } catch {
                #expect(error.code == .invalidParameter && error.message.contains(field), "\(field): \(error)")
            }
        }
        var stream = input.description
        stream.channelCount = 0
        #expect(throws: AudioError.self) { try RTMPPublisher(url: url, stream: stream) }
        stream = input.description
        stream.audioSpecificConfig = [0xFF]
        #expect(throws: AudioError.self) { try RTMPPublisher(url: url, stream: stream) }
        #expect(try RTMPPublisher(url: url, stream: input.description).currentStatistics.state == .idle)
    }

    @Test("Starting twice is an invalid-state error; stopping twice is harmless")
    func startTwice() async throws {
        let server = try NginxRTMPServer()
        defer { server.remove() }
        let input = try EncodedSignal(seconds: 0.1)
        let publisher = try RTMPPublisher(url: RTMPURL(server.url("twice")), stream: input.description)
        try await publisher.start()
        await #expect(throws: AudioError.self) { try await publisher.start() }
        await publisher.stop()
        await publisher.stop()
        #expect(publisher.currentStatistics.state == .stopped)
    }

    @Test("Frames queued faster than the network takes them: the oldest are dropped and counted, the queue stays bounded")
    func queueDropsOldest() async throws {
        let port = try freeLoopbackPort()
        let input = try EncodedSignal(seconds: 5)
        var configuration = RTMPPublisher.Configuration()
        configuration.queueMilliseconds = 1000
        // Never started: nothing drains the queue.
        let publisher = try RTMPPublisher(
            url: RTMPURL("rtmp://127.0.0.1:\(port)/live/x"), stream: input.description, configuration: configuration)
        for p in input.packets { publisher.send(aacFrame: p.data, timestamp: p.streamMilliseconds) }
        let stats = publisher.currentStatistics
        #expect(stats.queuedMilliseconds <= 1000 && stats.queuedMilliseconds >= 970, "\(stats)")
        #expect(stats.droppedPackets + stats.queuedPackets == input.packets.count)
        await publisher.stop()
        #expect(publisher.currentStatistics.droppedPackets == input.packets.count)
    }

    @Test("rtmps:// publishes through TLS with the server's certificate verified; an untrusted certificate is refused")
    func tls() async throws {
        let server = try NginxRTMPServer(tls: true)
        defer { server.remove() }
        let port = try #require(server.tlsPort)
        let url = "rtmps://localhost:\(port)/live/\(Self.secret)"
        // Not trusted: the default configuration verifies against the system's roots.
        let (refused, _) = try await startError(url)
        let e = try #require(refused)
        #expect(e.code == .connectionFailed, "\(e)")
        #expect(e.message.contains("TLS") && !e.message.contains(Self.secret), "\(e)")
        // Trusted: published and recorded.
        let input = try EncodedSignal(seconds: 1)
        var configuration = RTMPPublisher.Configuration()
        configuration.tls.trustRoots = .file(server.certificatePath)
        configuration.queueMilliseconds = 60_000
        let publisher = try RTMPPublisher(url: RTMPURL(url), stream: input.description, configuration: configuration)
        try await publisher.start()
        await publish(input.packets[...], to: publisher, realTime: false)
        await publisher.stop()
        server.stop()
        let files = server.recordedFiles(start: 1)
        try #require(files.count == 1)
        #expect(try packetTimes(files[0]).count == input.packets.count)
    }
}
