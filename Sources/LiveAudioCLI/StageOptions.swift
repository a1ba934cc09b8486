import ArgumentParser
import FoundationEssentials
import LiveAudio
import LiveAudioStage
import StageCertificates

#if canImport(Glibc)
import Glibc
#endif

/// `--web [HOST:]PORT` and what goes with it — the token (`--web-token`, `--web-token-file`, `LIVEAUDIO_WEB_TOKEN`)
/// and HTTPS's certificate (`--web-cert`, `--web-key`, else one made and kept) — for the stage, a web page for the
/// room, while `karaoke` or `stream` runs.
struct StageOptions: ParsableArguments {
    @Option(
        name: .customLong("web"),
        help: "Serve the stage — a web page with the lyrics, meters and controls — at [HOST:]PORT (host 127.0.0.1 unless given; port 0: any free one). The address is printed. Off 127.0.0.1 it is HTTPS.")
    var web: String?

    @Option(
        name: .customLong("web-token"),
        help: "The token the stage's controls need (default: none on 127.0.0.1; on any other address one is generated and printed in the address). Other users see arguments in ps: prefer --web-token-file or LIVEAUDIO_WEB_TOKEN.")
    var webToken: String?

    @Option(
        name: .customLong("web-token-file"),
        help: "A file whose first line is the stage's token (kept out of the command line, which other users can read in ps).")
    var webTokenFile: String?

    @Option(name: .customLong("web-cert"), help: "The stage's HTTPS certificate (PEM; a chain, the server's first), with --web-key.")
    var webCertificate: String?

    @Option(name: .customLong("web-key"), help: "The private key of --web-cert (PEM).")
    var webKey: String?

    /// The environment variable a token may come in.
    static let tokenVariable = "LIVEAUDIO_WEB_TOKEN"

    /// The stage's configuration, or nil without --web. Off 127.0.0.1 it has a certificate: the one given, else the
    /// one kept in the user's data folder (made the first time), whose fingerprint is printed.
    func configuration(environment: [String: String] = ProcessInfo.processInfo.environment) throws(AudioError) -> StageConfiguration? {
        guard let web else {
            for (given, name) in [(webToken, "--web-token"), (webTokenFile, "--web-token-file"), (webCertificate, "--web-cert"), (webKey, "--web-key")]
            where given != nil {
                throw AudioError(.invalidParameter, "\(name) needs --web")
            }
            return nil
        }
        var c = try StageConfiguration(parsing: web)
        if let token = try self.token(environment: environment) {
            guard token.count >= 8, token.count <= 128, token.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
                throw AudioError(.invalidParameter, "the stage's token must be 8 … 128 letters, digits, - or _")
            }
            c.token = token
        }
        c.tls = try tls(for: c, environment: environment)
        return c
    }

    /// The token from --web-token, --web-token-file or the environment (one of them at most).
    private func token(environment: [String: String]) throws(AudioError) -> String? {
        let fromEnvironment = environment[Self.tokenVariable].flatMap { $0.isEmpty ? nil : $0 }
        guard [webToken != nil, webTokenFile != nil].filter({ $0 }).count <= 1 else {
            throw AudioError(.invalidParameter, "--web-token and --web-token-file: give one")
        }
        if let webToken { return webToken }
        if let path = webTokenFile {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw AudioError(.fileIO, "cannot read --web-token-file '\(path)'")
            }
            let line = text.split(whereSeparator: \.isNewline).first.map { String($0).trimmingWhitespace() } ?? ""
            guard !line.isEmpty else { throw AudioError(.invalidParameter, "--web-token-file '\(path)' is empty: its first line is the token") }
            var st = stat()
            if stat(path, &st) == 0, st.st_mode & (S_IRGRP | S_IROTH) != 0 {
                note("warning: '\(path)' holds the stage's token and other users can read it (chmod 600 '\(path)')")
            }
            return line
        }
        return fromEnvironment
    }

    /// HTTPS's certificate: none on loopback (unless given), the given one, or the kept one.
    private func tls(for c: StageConfiguration, environment: [String: String]) throws(AudioError) -> StageTLS? {
        switch (webCertificate, webKey) {
        case (let certificate?, let key?):
            guard let pem = try? String(contentsOfFile: certificate, encoding: .utf8) else { throw AudioError(.fileIO, "cannot read --web-cert '\(certificate)'") }
            guard let keyPEM = try? String(contentsOfFile: key, encoding: .utf8) else { throw AudioError(.fileIO, "cannot read --web-key '\(key)'") }
            let checked = try StageCertificate(certificatePEM: pem, keyPEM: keyPEM)
            note("stage: HTTPS with '\(certificate)' (SHA-256 \(checked.fingerprint))")
            return StageTLS(certificatePEM: pem, keyPEM: keyPEM)
        case (nil, nil):
            guard !StageAccess.isLoopback(c.host) else { return nil }
            let folder = StageCertificate.defaultFolder(environment: environment)
            let kept = try StageCertificate.kept(for: c.certificateNames, in: folder)
            note("stage: HTTPS with \(kept.isNew ? "a new certificate" : "the certificate") kept in \(folder) for \(kept.names.joined(separator: ", ")) (SHA-256 \(kept.fingerprint)); a browser warns once about it: compare the fingerprint")
            return StageTLS(certificatePEM: kept.certificatePEM, keyPEM: kept.keyPEM)
        default:
            throw AudioError(.invalidParameter, "--web-cert and --web-key go together")
        }
    }
}
