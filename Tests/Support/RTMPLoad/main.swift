import Foundation
import LiveAudio

// The RTMP load benchmark: N streams published from this one process to a local server at real-time pacing.
//
//   RTMPLoad publish URL_PREFIX N SECONDS   N publishers share one encoded tone (the cost of RTMP itself)
//   RTMPLoad session URL_PREFIX N SECONDS   N live-stream sessions, each with its own file pacer and AAC encoder
//
// Stream k goes to URL_PREFIX + k. Prints one line of key=value pairs: the streams, the seconds, the frames sent
// and dropped, the reconnects, the CPU this process used (user + system) per stream as a percentage of one core,
// and the capture-to-socket latency (the median of the streams' p50s, the largest p99).

func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

func report(_ mode: String, streams: Int, seconds: Double, stats: [RTMPStatistics], cpu: Double, wall: Double) {
    let p50s = stats.compactMap { $0.latency?.p50 }.sorted()
    let p99 = stats.compactMap { $0.latency?.p99 }.max() ?? .nan
    let fields: [(String, String)] = [
        ("mode", mode), ("streams", "\(streams)"), ("seconds", String(format: "%.1f", seconds)),
        ("sent", "\(stats.reduce(0) { $0 + $1.packetsSent })"), ("dropped", "\(stats.reduce(0) { $0 + $1.droppedPackets })"),
        ("reconnects", "\(stats.reduce(0) { $0 + $1.reconnects })"),
        ("failed", "\(stats.filter { $0.state == .failed }.count)"),
        ("cpuPercentPerStream", String(format: "%.3f", cpu / wall * 100 / Double(streams))),
        ("cpuPercentTotal", String(format: "%.1f", cpu / wall * 100)),
        ("latencyP50ms", String(format: "%.1f", p50s.isEmpty ? .nan : p50s[p50s.count / 2])),
        ("latencyP99ms", String(format: "%.1f", p99)),
    ]
    print(fields.map { "\($0.0)=\($0.1)" }.joined(separator: " "))
}

func publishMode(prefix: String, streams: Int, seconds: Double) async throws {
    let rate = 48_000.0
    let n = Int(seconds * rate)
    let tone = (0..<2).map { c in (0..<n).map { Float(0.25 * sin(2 * Double.pi * (c == 0 ? 440 : 660) * Double($0) / rate)) } }
    let encoder = try AACEncoder(settings: AACEncoderSettings(sampleRate: rate, channelCount: 2, bitRate: 128_000))
    let buffer = PCMBuffer(channels: tone)
    var packets = try withExtendedLifetime(buffer) { try encoder.encode(buffer.view(frames: n)) }
    packets += try encoder.flush()
    let description = AACStreamDescription(
        sampleRate: rate, channelCount: 2, bitRate: 128_000, audioSpecificConfig: encoder.audioSpecificConfig)
    var publishers: [RTMPPublisher] = []
    for k in 0..<streams {
        let p = try RTMPPublisher(url: RTMPURL(prefix + "\(k)"), stream: description)
        try await p.start()
        publishers.append(p)
    }
    let cpu0 = cpuSeconds()
    let start = monotonicNanoseconds()
    // One pacer for all streams: each packet goes to every publisher when its time comes.
    for p in packets {
        let due = start + UInt64(max(0, p.streamMilliseconds)) * 1_000_000
        let now = monotonicNanoseconds()
        if due > now { try await Task.sleep(nanoseconds: due - now) }
        for publisher in publishers { publisher.send(aacFrame: p.data, timestamp: p.streamMilliseconds, captureTime: due) }
    }
    let wall = Double(monotonicNanoseconds() - start) / 1e9
    let cpu = cpuSeconds() - cpu0
    for p in publishers { await p.stop() }
    report("publish", streams: streams, seconds: seconds, stats: publishers.map(\.currentStatistics), cpu: cpu, wall: wall)
}

func sessionMode(prefix: String, streams: Int, seconds: Double) async throws {
    let path = NSTemporaryDirectory() + "rtmpload-\(getpid()).wav"
    defer { try? FileManager.default.removeItem(atPath: path) }
    let n = Int(seconds * 48_000)
    let format = try StreamFormat(sampleRate: 48_000, channelCount: 2, sampleType: .int16, interleaved: true)
    let writer = try WAVFileWriter(path: path, format: format)
    let tone = (0..<2).map { c in (0..<n).map { Float(0.25 * sin(2 * Double.pi * (c == 0 ? 440 : 660) * Double($0) / 48_000)) } }
    let buffer = PCMBuffer(channels: tone)
    try withExtendedLifetime(buffer) { try writer.write(buffer.view(frames: n)) }
    try writer.finish()
    var sessions: [LiveStreamSession] = []
    for k in 0..<streams {
        let s = try LiveStreamSession(
            LiveStreamSession.Configuration(input: .file(path: path, realTime: true), outputs: [.rtmp(try RTMPURL(prefix + "\(k)"))]))
        sessions.append(s)
    }
    let cpu0 = cpuSeconds()
    let start = monotonicNanoseconds()
    for s in sessions { try await s.start() }
    while !sessions.allSatisfy(\.hasEnded) { try await Task.sleep(nanoseconds: 50_000_000) }
    let wall = Double(monotonicNanoseconds() - start) / 1e9
    let cpu = cpuSeconds() - cpu0
    var stats: [RTMPStatistics] = []
    for s in sessions {
        let summary = await s.stop()
        stats += summary.statistics.outputs.compactMap(\.rtmp)
    }
    report("session", streams: streams, seconds: seconds, stats: stats, cpu: cpu, wall: wall)
}

let args = CommandLine.arguments
guard args.count == 5, let streams = Int(args[3]), let seconds = Double(args[4]), streams > 0, seconds > 0 else {
    FileHandle.standardError.write(Data("usage: RTMPLoad publish|session URL_PREFIX STREAMS SECONDS\n".utf8))
    exit(2)
}
do {
    switch args[1] {
    case "publish": try await publishMode(prefix: args[2], streams: streams, seconds: seconds)
    case "session": try await sessionMode(prefix: args[2], streams: streams, seconds: seconds)
    default:
        FileHandle.standardError.write(Data("RTMPLoad: mode must be publish or session\n".utf8))
        exit(2)
    }
} catch {
    FileHandle.standardError.write(Data("RTMPLoad: \(error)\n".utf8))
    exit(1)
}
