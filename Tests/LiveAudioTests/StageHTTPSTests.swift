import Foundation
import LiveAudio
import LiveAudioStage
import StageCertificates
import Testing
import TestSupport

/// A presenter with nothing to show: the server's own behaviour is what is tested.
struct QuietPresenter: StagePresenter {
    var kind: StageMessages.Kind { .stream }
    func hello(canControl: Bool) -> String { "{\"type\":\"hello\",\"canControl\":\(canControl)}" }
    func tick(_ snapshot: Int, wallMilliseconds: Double) -> String { "{\"type\":\"tick\",\"n\":\(snapshot)}" }
    func events(_ snapshot: Int) -> [(type: String, json: String)] { [] }
    func perform(_ control: StageMessages.Control) throws(AudioError) {}
}

/// The stage over HTTPS: its certificate made, kept and checked (swift-certificates), the page served over TLS only
/// off 127.0.0.1, plain HTTP on the same port sent on to HTTPS, the WebSocket over TLS from the page's own HTTPS
/// origin; checked with curl and OpenSSL's client, not with the server's own code.
@Suite(.serialized) struct StageHTTPSTests {
    @Test func aCertificateIsMadeKeptAndMadeAnewWhenItMust() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let folder = dir.file("stage")
        let now = Date().timeIntervalSince1970
        let first = try StageCertificate.kept(for: ["127.0.0.2", "stagebox"], in: folder, now: now)
        #expect(first.isNew && first.names == ["127.0.0.2", "stagebox"])
        #expect(first.fingerprint.split(separator: ":").count == 32 && first.fingerprint.allSatisfy { $0.isHexDigit || $0 == ":" })
        // The key for the user alone, in a folder for the user alone.
        let keyMode = try FileManager.default.attributesOfItem(atPath: folder + "/key.pem")[.posixPermissions] as? Int
        let folderMode = try FileManager.default.attributesOfItem(atPath: folder)[.posixPermissions] as? Int
        #expect(keyMode == 0o600 && folderMode == 0o700, "key \(String(keyMode ?? 0, radix: 8)), folder \(String(folderMode ?? 0, radix: 8))")
        // OpenSSL reads what was written: the names, the key's curve, the fingerprint.
        let text = try runProcess("openssl", ["x509", "-in", folder + "/certificate.pem", "-noout", "-text", "-fingerprint", "-sha256"])
        #expect(text.status == 0 && text.stdout.contains("IP Address:127.0.0.2") && text.stdout.contains("DNS:stagebox"), "\(text.stdout)")
        #expect(text.stdout.contains("prime256v1") && text.stdout.contains("TLS Web Server Authentication"), "\(text.stdout)")
        #expect(text.stdout.contains(first.fingerprint), "OpenSSL's fingerprint is the one printed: \(first.fingerprint)")
        let key = try runProcess("openssl", ["pkey", "-in", folder + "/key.pem", "-noout"])
        #expect(key.status == 0, "\(key.stderr)")
        // Kept: the same one again, for the same names or fewer.
        let again = try StageCertificate.kept(for: ["127.0.0.2"], in: folder, now: now + 86_400)
        #expect(!again.isNew && again.fingerprint == first.fingerprint)
        // A new address: a new certificate naming the old ones too.
        let moved = try StageCertificate.kept(for: ["192.168.7.9"], in: folder, now: now)
        #expect(moved.isNew && moved.names == ["127.0.0.2", "stagebox", "192.168.7.9"] && moved.fingerprint != first.fingerprint)
        // A week before it ends, made anew.
        let renewed = try StageCertificate.kept(for: ["192.168.7.9"], in: folder, now: now + StageCertificate.validity - 6 * 86_400)
        #expect(renewed.isNew)
        // Given ones are checked: a key of another certificate, or text that is neither.
        let other = try StageCertificate.make(for: ["127.0.0.2"])
        #expect(throws: AudioError.self) { try StageCertificate(certificatePEM: first.certificatePEM, keyPEM: other.keyPEM) }
        #expect(throws: AudioError.self) { try StageCertificate(certificatePEM: "not a certificate", keyPEM: other.keyPEM) }
        #expect(throws: AudioError.self) { try StageCertificate.make(for: ["bad name!"]) }
        #expect(throws: AudioError.self) { try StageCertificate.make(for: []) }
    }

    /// Off 127.0.0.1 the stage will not serve plain HTTP: without a certificate it does not start, and says why.
    @Test func offLoopbackWithoutACertificateTheStageDoesNotStart() async throws {
        var c = StageConfiguration()
        c.host = "127.0.0.2"
        do {
            let server = try await StageServer.start(c, presenter: QuietPresenter(), monitor: SnapshotMonitor(interval: 0.05) { 0 })
            await server.stop()
            Issue.record("a plain stage on 127.0.0.2 started")
        } catch {
            #expect(error.code == .invalidParameter && error.message.contains("HTTPS") && error.message.contains("--web-cert"), "\(error.message)")
        }
    }

    @Test func theStageIsServedOverHTTPSAndPlainHTTPIsSentThere() async throws {
        let certificate = try StageCertificate.make(for: ["127.0.0.2"])
        var c = StageConfiguration()
        c.host = "127.0.0.2"
        c.tls = StageTLS(certificatePEM: certificate.certificatePEM, keyPEM: certificate.keyPEM)
        let server = try await StageServer.start(c, presenter: QuietPresenter(), monitor: SnapshotMonitor(interval: 0.05) { 7 })
        let url = server.url
        let port = server.access.port
        let result = try await offPool { () throws -> (ProcessResult, ProcessResult, ProcessResult, ProcessResult) in
            let page = try runProcess("curl", ["-sk", "-D", "-", url])
            let plain = try runProcess("curl", ["-s", "-D", "-", url.replacingOccurrences(of: "https://", with: "http://")])
            let served = try runProcess("sh", ["-c", "openssl s_client -connect 127.0.0.2:\(port) </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"])
            // The WebSocket over TLS from the page's own origin (and refused from the plain one).
            let socket = try runProcess("python3", ["-c", Self.upgradeScript, "127.0.0.2", String(port)])
            return (page, plain, served, socket)
        }
        await server.stop()
        let (page, plain, served, socket) = result
        #expect(url.hasPrefix("https://127.0.0.2:\(port)/?token="), "\(url)")
        #expect(page.status == 0 && page.stdout.hasPrefix("HTTP/1.1 200") && page.stdout.contains("<html"), "\(page.stdout.prefix(400)) \(page.stderr)")
        #expect(page.stdout.contains("connect-src 'self' wss://127.0.0.2:\(port)"), "the page may open its secure socket")
        #expect(plain.stdout.hasPrefix("HTTP/1.1 308"), "\(plain.stdout.prefix(300))")
        #expect(plain.stdout.contains("Location: \(url)"), "sent on to the same address over HTTPS: \(plain.stdout.prefix(300))")
        #expect(!plain.stdout.contains("<html"), "plain HTTP never gets the page")
        #expect(served.stdout.contains(certificate.fingerprint), "the certificate served is the one given: \(served.stdout)")
        #expect(socket.stdout.split(separator: "\n") == ["https 101", "http 403"], "\(socket.stdout) \(socket.stderr)")
    }

    /// A WebSocket upgrade over TLS with each origin; prints the origin's scheme and the status.
    static let upgradeScript = """
        import socket, ssl, sys
        host, port = sys.argv[1], int(sys.argv[2])
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        for scheme in ["https", "http"]:
            with context.wrap_socket(socket.create_connection((host, port), timeout=5)) as s:
                s.sendall(("GET /ws HTTP/1.1\\r\\nHost: %s:%d\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n"
                           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\nSec-WebSocket-Version: 13\\r\\n"
                           "Origin: %s://%s:%d\\r\\n\\r\\n" % (host, port, scheme, host, port)).encode())
                print(scheme, s.recv(4096).decode("latin-1").split(" ")[1])
        """
}
