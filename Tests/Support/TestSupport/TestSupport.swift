import Foundation
import LiveAudio

/// What a finished process printed, and how it ended.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

/// Runs `executable` (a path, or a name looked up in PATH) with `arguments` and waits for it.
public func runProcess(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws
    -> ProcessResult
{
    let process = Process()
    if executable.contains("/") {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
    } else {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [executable] + arguments
    }
    var env = ProcessInfo.processInfo.environment
    for (k, v) in environment { env[k] = v }
    process.environment = env
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    // Read both pipes fully before waiting, so a chatty child cannot block on a full pipe.
    let errData = LockedData()
    let errThread = Thread { errData.set(err.fileHandleForReading.readDataToEndOfFile()) }
    errThread.start()
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    while !errThread.isFinished { usleep(1000) }
    return ProcessResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData.get(), as: UTF8.self))
}

final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func set(_ d: Data) { lock.withLock { data = d } }
    func get() -> Data { lock.withLock { data } }
}

/// The folder holding the built products (the test bundle's folder): `liveaudio`, `AllocationProbe`, the
/// malloc interposer library.
public var productsDirectory: String {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    return (exe as NSString).deletingLastPathComponent
}

/// A new empty temporary folder, removed by ``TemporaryDirectory/remove()``.
public struct TemporaryDirectory: Sendable {
    public let path: String
    public init() throws {
        path = NSTemporaryDirectory() + "liveaudio-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    public func file(_ name: String) -> String { path + "/" + name }
    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// FFmpeg, the reference decoder and encoder for tests. A missing ffmpeg is a test failure: `make test`
/// installs it.
public enum FFmpeg {
    /// Decodes any audio file with FFmpeg to Float32, one array per channel.
    public static func decode(_ path: String, channels: Int) throws -> [[Float]] {
        let raw = path + ".ffmpeg.f32"
        defer { try? FileManager.default.removeItem(atPath: raw) }
        let r = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-i", path, "-f", "f32le", "-c:a", "pcm_f32le", raw])
        guard r.status == 0 else { throw FFmpegError(message: "ffmpeg failed to decode \(path): \(r.stderr)") }
        let data = try Data(contentsOf: URL(fileURLWithPath: raw))
        let samples = data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        let frames = samples.count / channels
        return (0..<channels).map { c in (0..<frames).map { samples[$0 * channels + c] } }
    }

    /// Runs ffmpeg with `arguments` (after `-hide_banner -loglevel error -y`).
    public static func run(_ arguments: [String]) throws {
        let r = try runProcess("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y"] + arguments)
        guard r.status == 0 else { throw FFmpegError(message: "ffmpeg \(arguments.joined(separator: " ")): \(r.stderr)") }
    }

    /// FFmpeg's own loudness meter (the `ebur128` filter) on a file: the integrated loudness (LUFS, to 0.001, from
    /// the filter's metadata after the last frame), the loudness range (LU) and the true peak (dBTP, its summary's,
    /// to 0.1).
    public static func ebur128(_ path: String) throws -> (integrated: Double, range: Double, truePeak: Double) {
        let meta = path + ".r128.txt"
        defer { try? FileManager.default.removeItem(atPath: meta) }
        let r = try runProcess(
            "ffmpeg", ["-hide_banner", "-nostats", "-i", path, "-af", "ebur128=metadata=1:peak=true,ametadata=print:file=\(meta)", "-f", "null", "-"])
        guard r.status == 0 else { throw FFmpegError(message: "ffmpeg ebur128 \(path): \(r.stderr)") }
        let text = try String(contentsOfFile: meta, encoding: .utf8)
        func last(_ key: String) -> Double? {
            text.split(separator: "\n").last { $0.hasPrefix(key + "=") }.flatMap { Double($0.dropFirst(key.count + 1)) }
        }
        // The summary on standard error: "True peak:\n    Peak:       -1.0 dBFS".
        let summary = r.stderr.components(separatedBy: "True peak:").last ?? ""
        let peakLine = summary.split(separator: "\n").first { $0.contains("Peak:") } ?? ""
        let peak = peakLine.split(separator: " ").compactMap { Double($0) }.first
            ?? (peakLine.contains("-inf") ? -Double.infinity : Double.nan)
        guard let i = last("lavfi.r128.I"), let lra = last("lavfi.r128.LRA") else {
            throw FFmpegError(message: "ffmpeg ebur128 printed no loudness for \(path)")
        }
        return (i, lra, peak)
    }

    /// ffprobe's view of a file's first audio stream: codec_name, sample_rate, channels, duration_ts, …
    public static func probe(_ path: String) throws -> [String: String] {
        let r = try runProcess(
            "ffprobe",
            ["-v", "error", "-select_streams", "a:0", "-show_entries", "stream=codec_name,profile,sample_rate,channels,duration_ts,bits_per_sample,sample_fmt",
             "-of", "default=noprint_wrappers=1", path])
        guard r.status == 0 else { throw FFmpegError(message: "ffprobe \(path): \(r.stderr)") }
        var fields: [String: String] = [:]
        for line in r.stdout.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { fields[parts[0]] = parts[1] }
        }
        return fields
    }
}

public struct FFmpegError: Error, CustomStringConvertible {
    public let message: String
    public init(message: String) { self.message = message }
    public var description: String { message }
}

/// Renders `frames` frames from a graph offline, in blocks of the given sizes (cycled), into arrays per channel.
public func renderOffline(_ graph: RenderGraph, frames: Int, blockSizes: [Int] = [512]) throws -> [[Float]] {
    if graph.state == .uninitialized { try graph.initialize() }
    let renderer = OfflineRenderer(graph: graph)
    var result = Array(repeating: [Float](), count: graph.format.channelCount)
    var done = 0
    var k = 0
    while done < frames {
        let n = min(blockSizes[k % blockSizes.count], frames - done)
        k += 1
        let out = try renderer.render(frames: n)
        for c in 0..<result.count { result[c] += out[c] }
        done += n
    }
    return result
}

/// Writes channels of float samples to a WAV file in `sampleType`.
public func writeWAV(_ path: String, channels: [[Float]], sampleRate: Double = 48_000, sampleType: SampleType = .float32) throws {
    let format = try StreamFormat(sampleRate: sampleRate, channelCount: channels.count, sampleType: sampleType, interleaved: true)
    let writer = try WAVFileWriter(path: path, format: format)
    let buffer = PCMBuffer(channels: channels)
    try writer.write(buffer.view)
    try writer.finish()
}

/// Largest absolute difference between two equally long arrays.
public func maxAbsDifference(_ a: [Float], _ b: [Float]) -> Float {
    precondition(a.count == b.count, "lengths differ: \(a.count) vs \(b.count)")
    return zip(a, b).reduce(0) { max($0, abs($1.0 - $1.1)) }
}

/// ffprobe's audio packet timestamps (ms), in file order.
public func packetTimes(_ path: String) throws -> [Double] {
    let r = try runProcess(
        "ffprobe", ["-v", "error", "-select_streams", "a:0", "-show_entries", "packet=pts_time", "-of", "csv=p=0", path])
    guard r.status == 0 else { throw FFmpegError(message: "ffprobe \(path): \(r.stderr)") }
    // A packet with side data (the sequence header nginx repeats) prints it after the time: keep the first field.
    return r.stdout.split(separator: "\n").compactMap { line in
        line.split(separator: ",").first.flatMap { Double($0.trimmingCharacters(in: .whitespaces)) }.map { ($0 * 1000).rounded() }
    }
}

/// The names of this process's threads now (each at most 15 bytes, as the system keeps them), from /proc/self/task.
public func threadNames() -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []).compactMap {
        try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
