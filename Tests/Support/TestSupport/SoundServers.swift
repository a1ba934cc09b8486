import LiveAudio
import CTestSpawn
import Foundation
import Synchronization

/// A child process the tests started, stopped by its PID.
///
/// Spawned with `posix_spawnp` and reaped with `waitpid`, not with Foundation's `Process`: servers such as
/// PulseAudio close every inherited descriptor at start-up, which Foundation takes for the process's end — its
/// monitor thread then blocks in `wait4` and no other `Process` is ever reaped again.
public final class ChildProcess: @unchecked Sendable {
    public let pid: pid_t
    public let name: String
    private let log: String?
    private let lock = NSLock()
    private var status: Int32?

    /// Starts `executable` (a path, or a name looked up in PATH) with `arguments`; its output goes to `log` (or
    /// /dev/null). `stampedLog`: each line of the output goes to `log` as it is read, after the time it was read
    /// (the monotonic clock, in seconds with 6 decimals), so that the log tells how far apart two lines came.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:], log: String? = nil,
        stampedLog: Bool = false
    ) throws {
        name = executable
        self.log = log
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        var stamping: (read: Int32, write: Int32, log: Int32)?
        if stampedLog, let log {
            // A new file, not the old one truncated: the reader of a server killed just before may still be
            // writing its last lines into the old one.
            unlink(log)
            let file = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o644)
            var ends: [Int32] = [-1, -1]
            guard file >= 0, la_pipe_cloexec(&ends) == 0 else {
                let reason = String(cString: strerror(errno))
                if file >= 0 { close(file) }
                throw SoundServerError("cannot make the log \(log) for \(executable): \(reason)")
            }
            stamping = (ends[0], ends[1], file)
            posix_spawn_file_actions_adddup2(&actions, ends[1], 1)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, log ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        }
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Nothing else of this process: a server that inherited the write end of another test's pipe (a tool's
        // output being read to its end) kept that test waiting for as long as the server lived.
        _ = withUnsafeMutablePointer(to: &actions) { la_spawn_close_from($0, 3) }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawnp(&child, executable, &actions, nil, argv, envp)
        if let (readEnd, writeEnd, file) = stamping {
            close(writeEnd)  // the child's now: the reader sees the end when the child's copies close
            if result == 0 {
                Self.copyStamped(from: readEnd, to: file, name: executable)
            } else {
                close(readEnd)
                close(file)
            }
        }
        guard result == 0 else {
            throw SoundServerError("cannot start \(executable): \(String(cString: strerror(result))) (is it installed? `make test` installs it)")
        }
        pid = child
    }

    /// Copies lines from `readEnd` into `file`, each after the time it was read, on a thread of its own until the
    /// writer closes its end (the process ended); then closes both.
    private static func copyStamped(from readEnd: Int32, to file: Int32, name: String) {
        let thread = Thread {
            var pending: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            var stamp: [UInt8] = []
            while true {
                let n = chunk.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { break }
                var now = timespec()
                clock_gettime(CLOCK_MONOTONIC, &now)
                stamp = Array(String(format: "%ld.%06ld ", now.tv_sec, now.tv_nsec / 1000).utf8)
                pending += chunk[0..<n]
                var out: [UInt8] = []
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    out += stamp
                    out += pending[...newline]
                    pending.removeSubrange(...newline)
                }
                writeAll(file, out)
            }
            if !pending.isEmpty { writeAll(file, stamp + pending + [UInt8(ascii: "\n")]) }
            close(readEnd)
            close(file)
        }
        thread.name = "log \(name)"
        thread.start()
    }

    private static func writeAll(_ file: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return }
            offset += n
        }
    }

    /// True until the process has ended (and been reaped).
    public var isRunning: Bool { reap(blocking: false) == nil }

    /// The exit status once ended (128 + signal for a signal), or nil.
    private func reap(blocking: Bool) -> Int32? {
        lock.lock()
        defer { lock.unlock() }
        if let status { return status }
        var raw: Int32 = 0
        let r = waitpid(pid, &raw, blocking ? 0 : WNOHANG)
        guard r == pid else { return r < 0 ? -1 : nil }
        let signal = raw & 0x7F
        status = signal == 0 ? (raw >> 8) & 0xFF : 128 + signal
        return status
    }

    /// Sends `signal` to the process (by PID) and waits up to `timeout` seconds for it to end; then SIGKILL.
    public func stop(signal: Int32 = SIGTERM, timeout: Double = 5) {
        guard isRunning else { return }
        kill(pid, signal)
        let deadline = Date().addingTimeInterval(timeout)
        while isRunning, Date() < deadline { usleep(5_000) }
        if isRunning {
            kill(pid, SIGKILL)
            _ = reap(blocking: true)
        }
    }

    /// Waits for the process to end by itself (up to `timeout` seconds, then SIGKILL) and returns its status.
    @discardableResult
    public func wait(timeout: Double) -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while isRunning, Date() < deadline { usleep(5_000) }
        if isRunning { stop(signal: SIGKILL) }
        return reap(blocking: true) ?? -1
    }

    /// What the process wrote, when started with a log file.
    public var output: String { log.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) } ?? "" }

    deinit { stop(signal: SIGKILL) }
}

public struct SoundServerError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A PulseAudio server of the test's own, in user mode with a private runtime folder: null sinks (each with its
/// `.monitor` source), reached through the ALSA `pulse` plugin (`pulse:SINK`, `pulse:SINK.monitor`) by processes
/// given ``environment``. Started and stopped by PID. A missing `pulseaudio` is an error, not a skip: `make test`
/// installs it.
public final class PulseAudioServer: @unchecked Sendable {
    public let root: String
    public let sinks: [String]
    private var server: ChildProcess?
    private var helpers: [ChildProcess] = []
    private var keptAlive: [String] = []

    /// The variables a client needs to reach this server (and no other).
    public var environment: [String: String] {
        [
            "XDG_RUNTIME_DIR": root + "/run", "PULSE_RUNTIME_PATH": root + "/run/pulse", "PULSE_STATE_PATH": root + "/state",
            "PULSE_SERVER": "unix:" + root + "/run/pulse.sock", "PULSE_COOKIE": root + "/state/cookie",
            "HOME": root + "/home",
        ]
    }

    public init(sinks: [String]) throws {
        root = NSTemporaryDirectory() + "liveaudio-pulse-" + UUID().uuidString.prefix(8)
        self.sinks = sinks
        for d in ["run", "state", "home"] {
            try FileManager.default.createDirectory(atPath: root + "/" + d, withIntermediateDirectories: true)
        }
        chmod(root + "/run", 0o700)
        try start()
    }

    deinit { stop() }

    /// Starts the server (again, after ``kill()``) and waits until it answers; re-opens the keep-alive readers.
    public func start() throws {
        var arguments = [
            "-n", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no", "--log-target=stderr",
            "-L", "module-native-protocol-unix auth-anonymous=1 socket=\(root)/run/pulse.sock",
        ]
        for sink in sinks { arguments += ["-L", "module-null-sink sink_name=\(sink) rate=48000 channels=2"] }
        arguments += ["-L", "module-always-sink"]
        // Two attempts: at the start of the real-time phase, with every suite starting servers at once, a
        // pulseaudio has been seen to sit after its first log lines without ever listening (in two of three runs
        // of `make test` on 2026-11-25); a fresh one then starts at once. A server that fails twice is a failure.
        var earlier = ""
        attempts: for attempt in 0..<2 {
            server = try ChildProcess("pulseaudio", arguments, environment: environment, log: root + "/pulseaudio.log")
            // A bound on waiting, not a performance figure: with every core busy with other tests, start-up has
            // taken more than 10 s.
            let deadline = Date().addingTimeInterval(30)
            while true {
                let r = try runProcess("pactl", ["info"], environment: environment)
                if r.status == 0 { break attempts }
                guard server?.isRunning == true else {
                    throw SoundServerError("PulseAudio exited at start: \(server?.output ?? "")")
                }
                guard Date() < deadline else {
                    let what = "PulseAudio did not answer `pactl info` within 30 s (\(r.stderr)): \(server?.output ?? "")"
                    server?.stop()
                    if attempt == 1 { throw SoundServerError(earlier + what) }
                    earlier = "first attempt: \(what)\nsecond attempt: "
                    FileHandle.standardError.write(Data("test support: \(what); starting a fresh one\n".utf8))
                    continue attempts
                }
                usleep(50_000)
            }
        }
        let kept = keptAlive
        keptAlive = []
        for sink in kept { try keepMonitorAlive(sink) }
    }

    /// Keeps a low-latency reader on `SINK.monitor`: an idle null sink renders far ahead, and a new capture
    /// stream on its monitor then waits up to 1.3 s for its first data; with a reader attached, 8–22 ms.
    public func keepMonitorAlive(_ sink: String) throws {
        keptAlive.append(sink)
        helpers.append(
            try ChildProcess(
                "parec", ["-d", sink + ".monitor", "--latency-msec=5", "--raw"], environment: environment))
    }

    /// Plays a WAV file into `sink` (pacat); returns the process.
    public func play(_ file: String, to sink: String) throws -> ChildProcess {
        let p = try ChildProcess("pacat", ["-d", sink, "--file-format=wav", file], environment: environment)
        helpers.append(p)
        return p
    }

    /// Records `SINK.monitor` into a 48 kHz stereo 16-bit WAV file (parec) until stopped with SIGINT.
    public func record(_ sink: String, to file: String) throws -> ChildProcess {
        try record(source: sink + ".monitor", channels: 2, to: file)
    }

    /// Records the source `source` into a 48 kHz 16-bit WAV file of `channels` (parec) until stopped with SIGINT.
    public func record(source: String, channels: Int, to file: String) throws -> ChildProcess {
        let p = try ChildProcess(
            "parec",
            [
                "-d", source, "--rate=48000", "--channels=\(channels)", "--format=s16le", "--file-format=wav",
                "--latency-msec=10", file,
            ], environment: environment)
        helpers.append(p)
        return p
    }

    /// Kills the server (SIGKILL, as a crash) and its helpers, keeping the folder for a restart.
    public func kill() {
        server?.stop(signal: SIGKILL)
        server = nil
        helpers.forEach { $0.stop(signal: SIGKILL) }
        helpers = []
    }

    /// Stops everything started, by PID, and removes the folder.
    public func stop() {
        helpers.forEach { $0.stop() }
        helpers = []
        server?.stop()
        server = nil
        try? FileManager.default.removeItem(atPath: root)
    }

    /// Sets this server's variables in the test process itself, so libasound's pulse plugin (in-process) reaches it.
    public func exportToThisProcess() {
        for (k, v) in environment where k != "HOME" { setenv(k, v, 1) }
    }
}

/// A JACK server with the dummy driver (no sound card needed), named so that it is the test's own. Stopped by PID.
public final class JACKServer: @unchecked Sendable {
    public let name: String
    public let periodFrames: Int
    public let sampleRate: Int
    private var server: ChildProcess?
    private let log: String

    public init(periodFrames: Int = 1024, sampleRate: Int = 48_000) throws {
        name = "la" + String(UUID().uuidString.prefix(8)).lowercased()
        self.periodFrames = periodFrames
        self.sampleRate = sampleRate
        log = NSTemporaryDirectory() + "liveaudio-jackd-\(name).log"
        try start()
    }

    deinit { stop() }

    /// The variables a client needs to reach this server.
    public var environment: [String: String] { ["JACK_DEFAULT_SERVER": name] }

    /// Starts jackd (the dummy driver) under this server's name and waits until clients can connect: at creation,
    /// and again after ``kill()``.
    public func start() throws {
        // One server starting at a time on this machine: two jackd starting together (and their jack_wait
        // clients) have failed to register with each other's shared memory under load ("Cannot read socket"). A
        // lock on a file, since `make test` runs test processes side by side: flock's lock belongs to the open file,
        // so it keeps out this process's other threads as well as other processes.
        let fd = open(NSTemporaryDirectory() + "liveaudio-jackd-start.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0o666)
        if fd >= 0 {
            while flock(fd, LOCK_EX) != 0, errno == EINTR {}
        }
        defer { if fd >= 0 { close(fd) } }
        try startAlone()
    }

    private func startAlone() throws {
        for attempt in 0..<3 {
            server = try ChildProcess(
                "jackd", ["-n", name, "-d", "dummy", "-r", "\(sampleRate)", "-p", "\(periodFrames)", "-C", "2", "-P", "2"],
                log: log, stampedLog: true)
            let r = try runProcess("jack_wait", ["-w", "-t", "10"], environment: environment)
            if r.status == 0 { return }
            let output = server?.output ?? ""
            server?.stop()
            // JACK's registry keeps 8 server slots and a killed server keeps its slot; with no jackd running,
            // the stale registry can go, and the next server makes a new one.
            if attempt == 0, output.contains("Too many servers"), Self.runningServers() == 0 {
                Self.removeStaleRegistry()
                continue
            }
            // Once more after a start that failed for another reason (a busy machine); the registry is left alone.
            if attempt < 2, !output.contains("Too many servers") {
                usleep(200_000)
                continue
            }
            throw SoundServerError(
                "jackd did not start: \(output) \(r.stderr)"
                    + (output.contains("Too many servers")
                        ? " (JACK's registry /dev/shm/jack-shm-registry is full of servers that were killed; stop every jackd and remove it)"
                        : ""))
        }
    }

    /// jackd processes on this machine (any user's, any name).
    static func runningServers() -> Int {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.filter { pid in
            pid.allSatisfy(\.isNumber)
                && (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) == "jackd"
        }.count
    }

    /// Removes JACK's shared-memory registry and semaphores; only when no jackd runs.
    static func removeStaleRegistry() {
        let shm = "/dev/shm/"
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: shm)) ?? []
        where entry == "jack-shm-registry" || entry.hasPrefix("jack_sem.") || entry.hasPrefix("jack_db-")
            || (entry.hasPrefix("jack-") && entry.dropFirst(5).first?.isNumber == true)
        {
            try? FileManager.default.removeItem(atPath: shm + entry)
        }
    }

    /// What the server has printed so far ("" when its log cannot be read; a byte that is not UTF-8 is replaced).
    public var output: String {
        guard let data = FileManager.default.contents(atPath: log) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    /// The xrun notifications this server has sent its clients so far (``xrunNotifications(inLog:)``).
    public func xrunNotifications() -> Int { Self.xrunNotifications(inLog: output) }

    /// The xrun notifications a jackd log records: one for each late wake of the server's own thread
    /// ("JackTimedDriver::Process XRun") and one for each client it named late ("was not finished", "finished after
    /// current callback"). A client counts at most as many xruns as it was sent. Why each came is not read here:
    /// tests judge a session by its own per-cycle evidence (CPU time, switches, page faults), not by the server's log.
    /// Read by scripts/jackd_log.py, the one reader of jackd's log (the soak and the benchmarks read it there too).
    public static func xrunNotifications(inLog log: String) -> Int {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../../scripts/jackd_log.py").standardized.path
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("jackd-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        guard (try? log.write(toFile: file, atomically: true, encoding: .utf8)) != nil,
            let read = try? runProcess("python3", [script, "notifications", file]), read.status == 0,
            let count = Int(read.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        else { return -1 }
        return count
    }

    /// Kills the server at once (SIGKILL, by PID), as a crash would.
    public func kill() {
        server?.stop(signal: SIGKILL)
        server = nil
    }

    /// Stops the server by PID.
    public func stop() {
        server?.stop()
        server = nil
        try? FileManager.default.removeItem(atPath: log)
    }
}

/// Signals and comparisons for device tests.
public enum SignalCheck {
    /// Music for echo tests, broadband like a song: notes of four harmonics on pitches a few semitones apart
    /// (0.15–0.4 s each, a 10 ms attack and a decay), over a little noise, at −20 dBFS RMS; the same for a seed.
    public static func music(seconds: Double, seed: UInt64, sampleRate rate: Double = 48_000) -> [Float] {
        var generator = SplitMix64(seed: seed)
        let n = Int(seconds * rate)
        var x = [Float](repeating: 0, count: n)
        var start = 0
        while start < n {
            let length = Int(Double.random(in: 0.15...0.4, using: &generator) * rate)
            let f = 110 * pow(2, Double(Int.random(in: 0..<37, using: &generator)) / 12)
            for i in 0..<min(length, n - start) {
                let t = Double(i) / rate
                let envelope = min(1, t / 0.01) * exp(-3 * t)
                var v = 0.0
                for h in 1...4 { v += sin(2 * Double.pi * f * Double(h) * t) / Double(h) }
                x[start + i] += Float(envelope * v)
            }
            start += length
        }
        for i in 0..<n { x[i] += Float(Double.random(in: -0.02...0.02, using: &generator)) }
        let rms = (x.reduce(0.0) { $0 + Double($1 * $1) } / Double(n)).squareRoot()
        let gain = Float(pow(10, -20.0 / 20) / rms)
        return x.map { $0 * gain }
    }

    /// The reference test signal: channel 0 a chirp (200 Hz rising 600 Hz per second, amplitude 0.3), channel 1 a
    /// 523.25 Hz sine (amplitude 0.25). The chirp makes alignment unambiguous.
    public static func testSignal(seconds: Double, sampleRate: Double = 48_000) -> [[Float]] {
        let n = Int(seconds * sampleRate)
        let chirp = (0..<n).map { i -> Float in
            let t = Double(i) / sampleRate
            return Float(0.3 * sin(2 * Double.pi * (200 + 300 * t) * t))
        }
        let sine = (0..<n).map { i in Float(0.25 * sin(2 * Double.pi * 523.25 * Double(i) / sampleRate)) }
        return [chirp, sine]
    }

    /// Where `reference` starts inside `recorded`: the first loud sample of each gives a rough offset, then the
    /// lag within ±`search` frames of it that maximizes the dot product over `window` frames.
    public static func lag(of reference: [Float], in recorded: [Float], window: Int = 9600, search: Int = 2400) -> Int? {
        guard let r0 = reference.firstIndex(where: { abs($0) > 0.02 }),
            let s0 = recorded.firstIndex(where: { abs($0) > 0.02 })
        else { return nil }
        let rough = s0 - r0
        var best = -Double.infinity
        var bestLag: Int?
        let w = min(window, reference.count - r0)
        reference.withUnsafeBufferPointer { ref in
            recorded.withUnsafeBufferPointer { rec in
                for lag in (rough - search)...(rough + search) {
                    guard lag + r0 >= 0, lag + r0 + w <= rec.count else { continue }
                    var dot = 0.0
                    for j in 0..<w { dot += Double(ref[r0 + j]) * Double(rec[lag + r0 + j]) }
                    if dot > best {
                        best = dot
                        bestLag = lag
                    }
                }
            }
        }
        return bestLag
    }

    /// Pearson correlation and level difference (dB, recorded relative to reference) over the overlap of
    /// `reference` and `recorded` shifted by `lag`, skipping `skip` frames at the start.
    public static func compare(_ reference: [Float], _ recorded: [Float], lag: Int, skip: Int = 480)
        -> (correlation: Double, levelDB: Double, frames: Int)
    {
        let start = max(skip, -lag)
        let end = min(reference.count, recorded.count - lag)
        guard end > start else { return (0, -.infinity, 0) }
        var sx = 0.0, sy = 0.0, sxx = 0.0, syy = 0.0, sxy = 0.0
        for i in start..<end {
            let x = Double(reference[i])
            let y = Double(recorded[i + lag])
            sx += x
            sy += y
            sxx += x * x
            syy += y * y
            sxy += x * y
        }
        let n = Double(end - start)
        let cov = sxy / n - sx / n * sy / n
        let vx = sxx / n - sx / n * sx / n
        let vy = syy / n - sy / n * sy / n
        let correlation = cov / (vx * vy).squareRoot()
        let level = 10 * log10(syy / sxx)
        return (correlation, level, end - start)
    }

    /// The amplitude of the sine at `frequency` in `x`, by a single-bin DFT (linear, not dB).
    public static func toneAmplitude(_ x: ArraySlice<Float>, frequency: Double, sampleRate: Double = 48_000) -> Double {
        var re = 0.0, im = 0.0
        var k = 0
        for v in x {
            let phase = 2 * Double.pi * frequency * Double(k) / sampleRate
            re += Double(v) * cos(phase)
            im -= Double(v) * sin(phase)
            k += 1
        }
        return 2 * (re * re + im * im).squareRoot() / Double(x.count)
    }
}

// MARK: Waiting without holding the cooperative pool

/// Runs blocking work on a thread of its own and awaits it. The cooperative pool has as many threads as cores (two
/// here): a test that blocks on it — waiting for a process, a device, a server — keeps other tests' async consumers
/// (a microphone's `AsyncStream`) from running, and their rings overflow. Device tests wait through this instead.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            do {
                continuation.resume(returning: try body())
            } catch {
                continuation.resume(throwing: error)
            }
        }
        thread.start()
    }
}

/// A flag threads and tasks share (set once, read anywhere).
public final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var flag = false
    public init() {}
    public var isSet: Bool { lock.withLock { flag } }
    public func set() { lock.withLock { flag = true } }
}

/// A counter threads and tasks share.
public final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    public init() {}
    public var value: Int { lock.withLock { count } }
    public func increment() { lock.withLock { count += 1 } }
}

/// Waits on a thread of its own until `condition` holds (or `timeout` seconds pass), then runs `action` there at
/// once; returns whether the condition held. For devices run as fast as possible: a test task waiting on the
/// cooperative pool can be held back for seconds in a busy parallel run, while the device races on.
@discardableResult
public func when(
    timeout: Double = 120, _ condition: @escaping @Sendable () -> Bool, then action: @escaping @Sendable () -> Void
) async throws -> Bool {
    try await offPool {
        let deadline = Date().addingTimeInterval(timeout)
        var held = condition()
        while !held, Date() < deadline {
            usleep(500)
            held = condition()
        }
        action()
        return held
    }
}

/// ``runProcess(_:_:environment:)`` off the cooperative pool.
public func runTool(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) async throws
    -> ProcessResult
{
    try await offPool { try runProcess(executable, arguments, environment: environment) }
}

extension ChildProcess {
    /// ``wait(timeout:)`` without holding a cooperative thread.
    @discardableResult
    public func finished(timeout: Double) async -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while isRunning, Date() < deadline { try? await Task.sleep(nanoseconds: 10_000_000) }
        return wait(timeout: 0)
    }
}

extension PulseAudioServer {
    /// A started server, created off the cooperative pool.
    public static func started(sinks: [String]) async throws -> PulseAudioServer {
        try await offPool { try PulseAudioServer(sinks: sinks) }
    }

    /// ``start()`` off the cooperative pool.
    public func restart() async throws {
        try await offPool { try self.start() }
    }
}

extension JACKServer {
    /// A started server, created off the cooperative pool.
    public static func started(periodFrames: Int = 1024, sampleRate: Int = 48_000) async throws -> JACKServer {
        try await offPool { try JACKServer(periodFrames: periodFrames, sampleRate: sampleRate) }
    }
}

/// A wait that ran past its limit: the test fails with what it was waiting for, instead of hanging.
public struct TimeLimitExceeded: Error, CustomStringConvertible {
    public let what: String
    public let seconds: Double
    public var description: String { "timed out after \(seconds) s waiting for \(what)" }
}

/// Runs `body` (typically a `for await` over a stream that should end) and throws ``TimeLimitExceeded`` if it has
/// not finished within `seconds`; the body is cancelled, which ends an `AsyncStream` iteration.
public func withTimeLimit<T: Sendable>(
    _ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let work = Task { try await body() }
    let expired = LockedFlag()
    let timer = Task {
        try await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
        expired.set()
        work.cancel()
    }
    defer { timer.cancel() }
    let value = try await work.value
    if expired.isSet { throw TimeLimitExceeded(what: what, seconds: seconds) }
    return value
}

/// Polls `condition` every `interval` microseconds until it holds; throws ``TimeLimitExceeded`` after `seconds`.
/// Blocks the calling thread: use it off the cooperative pool (inside ``offPool(_:)``).
public func waitUntil(_ what: String, seconds: Double = 30, interval: UInt32 = 500, _ condition: () -> Bool) throws {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        guard Date() < deadline else { throw TimeLimitExceeded(what: what, seconds: seconds) }
        usleep(interval)
    }
}
