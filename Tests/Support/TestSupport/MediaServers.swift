import Foundation
import Synchronization

/// A real nginx with the RTMP module, started by a test on a free loopback port and stopped by its PID.
///
/// Application `live` accepts publishing from 127.0.0.1 and records every stream (`record all`) under
/// ``recordings``; application `closed` refuses every publisher. Each start records into a folder of its own
/// (`rec-1`, `rec-2`, …), so a restarted server never overwrites an earlier recording.
public final class NginxRTMPServer: @unchecked Sendable {
    public let root: String
    public let port: Int
    /// With `tls: true`: a TLS port (nginx's stream module) in front of the RTMP port, with a self-signed
    /// certificate for `localhost` and 127.0.0.1 at ``certificatePath``.
    public let tlsPort: Int?
    public var certificatePath: String { root + "/cert.pem" }
    private var process: ChildProcess?
    private var starts = 0

    public init(tls: Bool = false) throws {
        root = NSTemporaryDirectory() + "liveaudio-nginx-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        port = try freeLoopbackPort()
        if tls {
            tlsPort = try freeLoopbackPort()
            let r = try runProcess(
                "openssl",
                ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                 "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", root + "/key.pem", "-out", certificatePath])
            guard r.status == 0 else { throw SoundServerError("openssl could not make a certificate: \(r.stderr)") }
        } else {
            tlsPort = nil
        }
        try start()
    }

    /// `rtmp://127.0.0.1:PORT/APP/KEY`.
    public func url(_ key: String, app: String = "live") -> String { "rtmp://127.0.0.1:\(port)/\(app)/\(key)" }

    /// The recording folder of the `n`th start (1-based).
    public func recordings(start n: Int) -> String { root + "/rec-\(n)" }

    /// The FLV files recorded during the `n`th start, by name.
    public func recordedFiles(start n: Int) -> [String] {
        let dir = recordings(start: n)
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasSuffix(".flv") }.sorted()
            .map { dir + "/" + $0 }
    }

    /// Starts nginx (again) and waits until it accepts connections.
    public func start() throws {
        starts += 1
        let rec = recordings(start: starts)
        try FileManager.default.createDirectory(atPath: rec, withIntermediateDirectories: true)
        let stream =
            tlsPort.map {
                """
                stream { server { listen 127.0.0.1:\($0) ssl; ssl_certificate \(certificatePath);
                  ssl_certificate_key \(root)/key.pem; proxy_pass 127.0.0.1:\(port); } }
                """
            } ?? ""
        let config = """
            load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;
            \(tlsPort == nil ? "" : "load_module /usr/lib/nginx/modules/ngx_stream_module.so;")
            daemon off; master_process on; user root; worker_processes 1;
            pid \(root)/nginx.pid; error_log \(root)/error.log info;
            events { worker_connections 256; }
            rtmp { server { listen 127.0.0.1:\(port); chunk_size 4096;
              application live { live on; record all; record_path \(rec); record_unique on;
                allow publish 127.0.0.1; deny publish all; allow play all; }
              application closed { live on; deny publish all; allow play all; } } }
            \(stream)
            """
        try config.write(toFile: root + "/nginx.conf", atomically: true, encoding: .utf8)
        let p = try ChildProcess(
            "nginx", ["-p", root + "/", "-c", "nginx.conf", "-e", root + "/error.log"], log: root + "/nginx.out")
        process = p
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            if log.contains("bind() to 127.0.0.1:\(port) failed") {
                throw SoundServerError("nginx could not bind port \(port), which something else holds: \(log)")
            }
            if canConnect(port: port) { return }
            if !p.isRunning {
                throw SoundServerError("nginx exited at start: \(p.output) \((try? String(contentsOfFile: root + "/error.log", encoding: .utf8)) ?? "")")
            }
            usleep(5_000)
        }
        throw SoundServerError("nginx did not accept connections on port \(port) within 5 s")
    }

    /// Kills the master and its worker at once (SIGKILL): connections drop without a goodbye.
    public func kill() {
        guard let p = process, p.isRunning else { return }
        // The master first: killed after its worker, it could start another (it did, under load, and the orphan
        // went on taking connections).
        let children = childPIDs(of: p.pid)
        Foundation.kill(p.pid, SIGKILL)
        for child in children { Foundation.kill(child, SIGKILL) }
        p.stop(signal: SIGKILL)
        // The worker may outlive the master for a moment; wait until the port is free.
        let deadline = Date().addingTimeInterval(5)
        while canConnect(port: port), Date() < deadline { usleep(10_000) }
    }

    /// Freezes the master and its worker (SIGSTOP): connections stay open, nothing is read.
    public func pause() {
        guard let p = process, p.isRunning else { return }
        for child in childPIDs(of: p.pid) { Foundation.kill(child, SIGSTOP) }
        Foundation.kill(p.pid, SIGSTOP)
    }

    /// Lets a paused server run again (SIGCONT).
    public func resume() {
        guard let p = process else { return }
        Foundation.kill(p.pid, SIGCONT)
        for child in childPIDs(of: p.pid) { Foundation.kill(child, SIGCONT) }
    }

    /// Stops gracefully (SIGQUIT: recordings are closed), waiting for the master to exit.
    public func stop() {
        guard let p = process else { return }
        let children = childPIDs(of: p.pid)
        resume()
        p.stop(signal: SIGQUIT, timeout: 10)
        for child in children { Foundation.kill(child, SIGKILL) }
    }

    /// The server's error log (connections, publishes, recordings).
    public var log: String { (try? String(contentsOfFile: root + "/error.log", encoding: .utf8)) ?? "" }

    /// Stops the server and deletes its folder (kept when LIVEAUDIO_KEEP_SERVER_FILES is set, for debugging).
    /// Serious lines of nginx's log (a worker that died, an alert) are printed to standard error first.
    public func remove() {
        stop()
        let serious = log.split(separator: "\n").filter {
            $0.contains("exited on signal") || $0.contains("[alert]") || $0.contains("[emerg]") || $0.contains("[crit]")
        }
        if !serious.isEmpty {
            FileHandle.standardError.write(Data("nginx on port \(port) logged:\n\(serious.joined(separator: "\n"))\n".utf8))
        }
        if ProcessInfo.processInfo.environment["LIVEAUDIO_KEEP_SERVER_FILES"] != nil { return }
        try? FileManager.default.removeItem(atPath: root)
    }

    deinit { stop() }
}

/// Child processes of `pid`, from /proc.
func childPIDs(of pid: pid_t) -> [pid_t] {
    let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
    return text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
}

/// Ports handed out so far in this process.
private let portsHandedOut = Mutex(0)

/// A TCP port on 127.0.0.1 that nothing listens on right now, for a server a test starts.
///
/// Taken from 20000–31999, below the kernel's ephemeral range (32768–60999) where outgoing connections take their
/// local ports, and never the same twice in one process: two servers started by tests running in parallel cannot be
/// handed one port (the second would fail to bind while the first answered its readiness check).
public func freeLoopbackPort() throws -> Int {
    let offset = Int(getpid()) % 1000 * 12
    for _ in 0..<12_000 {
        let port = portsHandedOut.withLock { n -> Int in
            defer { n += 1 }
            return 20_000 + (offset + n) % 12_000
        }
        if (try? SilentListener(port: port)) != nil { return port }
    }
    throw SoundServerError("no free loopback port in 20000–31999")
}

/// True when something accepts TCP connections on 127.0.0.1:`port`.
public func canConnect(port: Int) -> Bool {
    // Close-on-exec: a process another test spawns meanwhile must not inherit it.
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}

/// A loopback TCP listener that accepts connections (in the kernel's backlog) and never says a word: a server
/// that hangs.
public final class SilentListener: @unchecked Sendable {
    public let port: Int
    private let fd: Int32

    /// Listens on `port` (0: one the kernel picks), with `backlog` connections queued at most.
    public init(port: Int = 0, backlog: Int32 = 16) throws {
        // Close-on-exec: a child another test spawns while this listens would otherwise inherit the port and keep
        // it listening for its whole life — the next server given the port then fails to bind, while connections
        // to the port still succeed.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, backlog) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard ok else {
            close(fd)
            throw SoundServerError("cannot listen on a loopback port")
        }
        self.fd = fd
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit {
        close(fd)
        fillers.forEach { close($0) }
    }

    private var fillers: [Int32] = []

    /// Fills the accept queue with connections nobody accepts, so that a further connect hangs in its TCP handshake
    /// (the kernel drops its SYN) until the connector's own timeout: a server that cannot be reached in time.
    public func fillQueue() {
        for _ in 0..<3 {
            let c = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue | SOCK_NONBLOCK.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = UInt16(port).bigEndian
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(c, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            fillers.append(c)
        }
        usleep(200_000)
    }
}
