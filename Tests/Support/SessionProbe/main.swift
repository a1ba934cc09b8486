import CAllocationProbe
import Foundation
import LiveAudio

// Runs sessions in a process of its own and reports, as JSON on standard output, the threads a karaoke take runs
// and what sessions leave behind when stopped in each state: threads and file descriptors (server connections are
// sockets among them). A process of its own because the test runner's threads and descriptors come and go with the
// other suites running beside it.
//
//   SessionProbe <folder> <song.wav> <jack server> <rtmp url> <silent port> [<ALSA input> <ALSA output>]
//
// With the ALSA PCMs (a sound server's, through its ALSA plugin), the same take runs on ALSA too, and its threads are
// reported as `alsaTakeThreads`.

let arguments = CommandLine.arguments
guard arguments.count == 6 || arguments.count == 8, let silentPort = Int(arguments[5]) else {
    FileHandle.standardError.write(
        Data("usage: SessionProbe <folder> <song.wav> <jack server> <rtmp url> <silent port> [<ALSA input> <ALSA output>]\n".utf8))
    exit(2)
}
let (folder, song, jack, rtmpURL) = (arguments[1], arguments[2], arguments[3], arguments[4])
let alsa = arguments.count == 8 ? (input: arguments[6], output: arguments[7]) : nil

/// A thread of the process: its id and name.
struct Snapshot {
    var threads: [String: String] = [:]
    var descriptors: [String: String] = [:]

    static func now() -> Snapshot {
        var s = Snapshot()
        for tid in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
            let name = (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8)) ?? "?"
            s.threads[tid] = name.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        for fd in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            s.descriptors[fd] = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) ?? "?"
        }
        return s
    }

    /// What is here and not in `base`: threads by name, descriptors by what they point at. Swift's cooperative
    /// pool grows threads as it likes (named by the dispatch queue, "…-qos…"); they are not the sessions'.
    func added(since base: Snapshot) -> (threads: [String], descriptors: [String]) {
        let threads = threads.filter { base.threads[$0.key] == nil && !$0.value.contains("qos") }.map(\.value).sorted()
        let descriptors = descriptors.filter { base.descriptors[$0.key] != $0.value }.map(\.value).sorted()
        return (threads, descriptors)
    }
}

/// Waits up to 3 s for what was added since `base` to go; returns what is left.
func leftovers(since base: Snapshot) -> [String: [String]] {
    let deadline = Date().addingTimeInterval(3)
    while true {
        let (threads, descriptors) = Snapshot.now().added(since: base)
        if (threads.isEmpty && descriptors.isEmpty) || Date() > deadline { return ["threads": threads, "descriptors": descriptors] }
        usleep(10_000)
    }
}

func karaokeConfiguration(_ take: String, outputs: [String], jackServer: String = jack) throws -> KaraokeSession.Configuration {
    let dir = folder + "/" + take
    try FileManager.default.createDirectory(atPath: dir + "/stems", withIntermediateDirectories: true)
    var c = KaraokeSession.Configuration(song: song)
    c.backend = .jack
    c.jackServer = jackServer
    c.inputDevice = "self"
    c.outputDevice = "self"
    c.periodFrames = 256
    c.roundTrip = .milliseconds(10)
    c.reconnect = false
    c.keyAdjustable = true
    c.stemsDirectory = dir + "/stems"
    c.recordPath = dir + "/song.m4a"
    c.outputs = try outputs.map { try LiveStreamSession.Output(parsing: $0) }
    return c
}

func streamConfiguration(_ url: String, jackServer: String = jack) throws -> LiveStreamSession.Configuration {
    var c = LiveStreamSession.Configuration(input: .device(name: "self", backend: .jack), outputs: [try .init(parsing: url)])
    c.jackServer = jackServer
    c.periodFrames = 256
    c.reconnectDevice = false
    return c
}

/// The process's resident memory in bytes (/proc/self/statm's second field, in pages).
func residentBytes() -> Int {
    let fields = ((try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? "").split(separator: " ")
    return fields.count > 1 ? (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE))) : 0
}

/// The least resident memory over ten readings 20 ms apart: what the process holds, without what the running room
/// (its encoder, its connection) has in hand for a moment.
func quietResidentBytes() async -> Int {
    var least = Int.max
    for _ in 0..<10 {
        least = min(least, residentBytes())
        await seconds(0.02)
    }
    return least
}

/// Bytes of heap the allocator has handed out and not had back (mallinfo2's uordblks).
func heapInUse() -> Int { Int(allocation_probe_heap_in_use()) }

func seconds(_ s: Double) async { try? await Task.sleep(nanoseconds: UInt64(s * 1e9)) }

/// Starts a session in a task of its own and stops it half a second later, while the start waits on a server that
/// never answers; returns the start's error.
func stoppedDuringStart(
    _ start: @escaping @Sendable () async throws(AudioError) -> Void, stop: @Sendable () async -> Void
) async -> String {
    let starting = Task { () -> String in
        do throws(AudioError) { try await start() } catch { return error.message }
        return ""
    }
    await seconds(0.5)
    await stop()
    return await starting.value
}

var report: [String: Any] = [:]
do {
    // The take: four stems, the song to M4A and to an RTMP server, a key change. Its threads, counted while it runs.
    let take = try KaraokeSession(try karaokeConfiguration("take", outputs: [rtmpURL]))
    try await take.start()
    await seconds(1)
    try take.setKey(cents: 200)
    await seconds(1)
    let names = Snapshot.now().threads.values.sorted()
    report["takeThreads"] = names
    report["takeOurThreads"] = names.filter { $0.hasPrefix("la-") }.count
    report["takeWorkThreads"] = names.filter { $0 == "la-work" }.count
    report["processors"] = onlineProcessorCount
    let summary = await take.stop()
    if let alsa {
        // The same take on ALSA: its device thread and its recovery thread besides (once the JACK take's are gone).
        for _ in 0..<300 where Snapshot.now().threads.values.contains(where: { ["la-work", "la-song", "la-io-supervise"].contains($0) }) {
            await seconds(0.01)
        }
        // What is counted is the take's threads, not the sound server's pace: a take the loaded server stalled for
        // a second (its ALSA plugin delivering nothing: a device error) is tried again, twice at most, and every
        // attempt's error is reported when none ran.
        var errors: [String] = []
        for attempt in 1...3 {
            var c = try karaokeConfiguration("alsa-take-\(attempt)", outputs: [rtmpURL])
            c.backend = .alsa
            c.jackServer = nil
            c.inputDevice = alsa.input
            c.outputDevice = alsa.output
            c.periodFrames = 1024
            let onALSA = try KaraokeSession(c)
            try await onALSA.start()
            await seconds(1)
            try onALSA.setKey(cents: 200)
            await seconds(1)
            let threads = Snapshot.now().threads.values.filter { $0.hasPrefix("la-") }.sorted()
            let error = (await onALSA.stop()).error
            guard let error, error.code == .deviceUnavailable else {
                report["alsaTakeThreads"] = threads
                report["alsaTakeError"] = error.map { "\($0)" } ?? ""
                report["alsaTakeAttempts"] = attempt
                break
            }
            errors.append("\(error)")
            report["alsaTakeError"] = errors.joined(separator: " | ")
            for _ in 0..<300 where Snapshot.now().threads.values.contains(where: { ["la-work", "la-song", "la-io-supervise"].contains($0) }) {
                await seconds(0.01)
            }
        }
    }
    report["takeError"] = summary.error.map { "\($0)" } ?? ""
    report["takeRecorded"] = Int(summary.recordedFrames)

    // What a process keeps once it has published (the publishers' event loop, `la-rtmp`) is there now: each session
    // after this must leave the process as it found it.
    await seconds(0.5)
    var states: [String: Any] = [:]
    var base = Snapshot.now()
    do {
        _ = try KaraokeSession(try karaokeConfiguration("made", outputs: [rtmpURL]))
    }
    states["karaoke made, never started"] = leftovers(since: base)

    base = Snapshot.now()
    do {
        let s = try KaraokeSession(try karaokeConfiguration("running", outputs: [rtmpURL]))
        try await s.start()
        await seconds(1)
        _ = await s.stop()
        _ = await s.stop()
    }
    states["karaoke running, stopped twice"] = leftovers(since: base)

    base = Snapshot.now()
    do {
        // A server that accepts and never answers: the start waits in the RTMP handshake when the stop comes.
        let s = try KaraokeSession(try karaokeConfiguration("starting", outputs: ["rtmp://127.0.0.1:\(silentPort)/live/x"]))
        states["karaoke stop during start: start's error"] = await stoppedDuringStart(
            { () async throws(AudioError) in try await s.start() }, stop: { _ = await s.stop() })
    }
    states["karaoke stopped during start"] = leftovers(since: base)

    base = Snapshot.now()
    do {
        let s = try KaraokeSession(try karaokeConfiguration("failed", outputs: [rtmpURL], jackServer: "no-such-server"))
        do throws(AudioError) { try await s.start() } catch { states["karaoke failed start: error"] = error.message }
        _ = await s.stop()
    }
    states["karaoke failed start, then stopped"] = leftovers(since: base)

    base = Snapshot.now()
    do { _ = try LiveStreamSession(try streamConfiguration(rtmpURL)) }
    states["stream made, never started"] = leftovers(since: base)

    base = Snapshot.now()
    do {
        let s = try LiveStreamSession(try streamConfiguration(rtmpURL))
        try await s.start()
        await seconds(1)
        _ = await s.stop()
    }
    states["stream running, stopped"] = leftovers(since: base)

    base = Snapshot.now()
    do {
        let s = try LiveStreamSession(try streamConfiguration("rtmp://127.0.0.1:\(silentPort)/live/y"))
        states["stream stop during start: start's error"] = await stoppedDuringStart(
            { () async throws(AudioError) in try await s.start() }, stop: { _ = await s.stop() })
    }
    states["stream stopped during start"] = leftovers(since: base)

    base = Snapshot.now()
    do {
        let s = try LiveStreamSession(try streamConfiguration(rtmpURL, jackServer: "no-such-server"))
        do throws(AudioError) { try await s.start() } catch { states["stream failed start: error"] = error.message }
        _ = await s.stop()
    }
    states["stream failed start, then stopped"] = leftovers(since: base)
    report["states"] = states

    // Ten takes back to back in one room (stems, M4A and RTMP for the evening): after each, the process's threads
    // (by name), descriptors and resident memory — the tenth must leave what the first left.
    do {
        try FileManager.default.createDirectory(atPath: folder + "/room", withIntermediateDirectories: true)
        var r = KaraokeRoom.Configuration()
        r.backend = .jack
        r.jackServer = jack
        r.inputDevice = "self"
        r.outputDevice = "self"
        r.periodFrames = 256
        r.roundTrip = .milliseconds(10)
        r.reconnect = false
        r.recordPath = folder + "/room/evening.m4a"
        r.outputs = [try LiveStreamSession.Output(parsing: rtmpURL)]
        let room = try KaraokeRoom(r)
        try await room.start()
        var takes: [[String: Any]] = []
        weak var previous: KaraokeTake?
        for n in 1...10 {
            let stems = folder + "/room/take-\(n)"
            try FileManager.default.createDirectory(atPath: stems, withIntermediateDirectories: true)
            var c = KaraokeTake.Configuration(song: song)
            c.regionInSeconds = KaraokeSession.RegionInSeconds(start: 0, end: 1)
            c.keyAdjustable = true
            c.stemsDirectory = stems
            let take = try KaraokeTake(c, room: room)
            try await room.play(take, after: 0.2)
            try take.setKey(cents: n % 2 == 0 ? 200 : -100)
            while !take.songHasEnded { await seconds(0.02) }
            let summary = await room.finish(take)
            await seconds(0.3)
            let now = Snapshot.now()
            takes.append([
                "threads": now.threads.values.filter { !$0.contains("qos") }.sorted(),
                "descriptors": now.descriptors.count, "residentBytes": await quietResidentBytes(),
                "recorded": Int(summary.recordedFrames), "error": summary.error.map { "\($0)" } ?? "",
                "previousTakeAlive": previous != nil, "heapInUse": heapInUse(),
            ])
            previous = take
        }
        let evening = await room.stop()
        report["roomTakes"] = takes
        report["roomError"] = evening.error.map { "\($0)" } ?? ""
        report["roomTakeCount"] = evening.takes
    }
} catch {
    report["error"] = "\(error)"
}
let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys, .prettyPrinted])
FileHandle.standardOutput.write(data)
FileHandle.standardOutput.write(Data("\n".utf8))
