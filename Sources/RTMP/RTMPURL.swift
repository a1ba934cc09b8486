import AudioCore

/// The error codes of RTMP publishing, added to ``/AudioCore/AudioError``'s.
extension AudioError.Code {
    /// A publishing URL that cannot be used (wrong scheme, no stream key, bad port, …).
    public static let invalidURL = AudioError.Code(fourCC: "url?")
    /// The server could not be reached: refused, unreachable, name not found, TLS failure.
    public static let connectionFailed = AudioError.Code(fourCC: "con!")
    /// The server broke the protocol: a bad handshake, malformed chunks or messages.
    public static let protocolError = AudioError.Code(fourCC: "prt!")
    /// The server refused what was asked (`_error`, or an onStatus of level "error"); the message carries its
    /// description and code.
    public static let rejected = AudioError.Code(fourCC: "rej!")
    /// The server did not answer in time.
    public static let timedOut = AudioError.Code(fourCC: "tmo!")
    /// An established connection went away.
    public static let connectionLost = AudioError.Code(fourCC: "lst!")
}

/// Where to publish: `rtmp://host[:port]/app[/instance]/key[?query]`, or `rtmps://…` for RTMP over TLS.
///
/// Everything after the host up to the last path segment is the application (`app` or `app/instance`, what goes in
/// `connect`); the last segment, with any query string, is the stream key (what goes in `publish`). The key is a
/// secret: ``description`` and every error message show the URL with the key replaced by `<key>`.
public struct RTMPURL: Hashable, Sendable, CustomStringConvertible {
    /// How to connect: plain TCP or TLS.
    public enum Scheme: String, Hashable, Sendable {
        /// `rtmp` is RTMP over plain TCP (default port 1935); `rtmps` is RTMP over TLS (default port 443).
        case rtmp, rtmps
        /// 1935 for rtmp, 443 for rtmps.
        public var defaultPort: Int { self == .rtmp ? 1935 : 443 }
    }

    /// The URL's scheme: `rtmp` or `rtmps` (written in any case in the URL).
    public let scheme: Scheme
    /// A name or an address (IPv6 without brackets).
    public let host: String
    /// The TCP port: the URL's, 1 … 65535, or the scheme's default (1935 for rtmp, 443 for rtmps).
    public let port: Int
    /// The application, with its instance when there is one (`live`, `live/studio`).
    public let app: String
    /// The stream name sent in `publish`, with the URL's query string when there is one. Secret.
    public let streamKey: String

    /// Parses `string`.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidURL`, saying what is wrong; the message never contains the key.
    public init(_ string: String) throws(AudioError) {
        func bad(_ why: String) -> AudioError {
            AudioError(.invalidURL, "not a usable RTMP URL: \(why) (expected rtmp://host[:port]/app/stream-key)")
        }
        guard !string.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) else {
            throw bad("it contains spaces or control characters")
        }
        guard let schemeEnd = string.firstRange(of: "://") else { throw bad("it has no scheme") }
        let schemeName = string[..<schemeEnd.lowerBound].lowercased()
        guard let scheme = Scheme(rawValue: schemeName) else {
            // Only a name that looks like a scheme is repeated back: anything else may hold the key.
            let plausible = schemeName.count <= 16 && schemeName.allSatisfy { $0.isLetter || $0.isNumber || "+-.".contains($0) }
            throw bad(plausible ? "the scheme is '\(schemeName)'; use rtmp:// or rtmps://" : "it has no scheme; use rtmp:// or rtmps://")
        }
        let rest = string[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        guard !authority.contains("@") else {
            throw bad("user names and passwords in the host part are not supported; put credentials in the stream key's query string")
        }
        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw bad("the IPv6 address has no closing ']'") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            // An IPv6 address (hex digits, ':' and '.', an optional %zone): anything else in brackets is not one.
            let address = host.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false)
            guard host.isEmpty || host.contains(":"), address[0].allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }),
                address.count == 1 || (!address[1].isEmpty && address[1].allSatisfy({ $0.isLetter || $0.isNumber || "-_.".contains($0) }))
            else { throw bad("the host in brackets is not an IPv6 address") }
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw bad("unexpected text after the IPv6 address") }
                portText = after.dropFirst()
            }
        } else if let colon = authority.firstIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            host = authority
        }
        guard !host.isEmpty else { throw bad("it has no host") }
        guard !host.contains(where: { $0 == "[" || $0 == "]" }) else { throw bad("the host has a bracket outside an IPv6 address") }
        var port = scheme.defaultPort
        if let portText {
            guard let p = Int(portText), (1...65_535).contains(p) else {
                throw bad("the port '\(portText)' is not a number from 1 to 65535")
            }
            port = p
        }
        var pathAndQuery = rest[authorityEnd...]
        if pathAndQuery.hasPrefix("/") { pathAndQuery = pathAndQuery.dropFirst() }
        let path: Substring
        let query: Substring?
        if let q = pathAndQuery.firstIndex(of: "?") {
            path = pathAndQuery[..<q]
            query = pathAndQuery[pathAndQuery.index(after: q)...]
        } else {
            path = pathAndQuery
            query = nil
        }
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        guard segments.count >= 2, !segments[0].isEmpty else {
            throw bad(segments.first?.isEmpty ?? true ? "it has no application" : "it has no stream key after the application")
        }
        guard !segments.contains(where: \.isEmpty) else {
            throw bad(segments.last!.isEmpty ? "the stream key is empty" : "the path has an empty segment")
        }
        self.scheme = scheme
        self.host = String(host)
        self.port = port
        app = segments.dropLast().joined(separator: "/")
        let key = String(segments.last!)
        streamKey = query.map { key + "?" + $0 } ?? key
    }

    /// The host as it appears in a URL (IPv6 in brackets).
    var hostInURL: String { host.contains(":") ? "[\(host)]" : host }

    /// `tcUrl` for `connect`: the URL up to the application, without the key.
    public var tcUrl: String {
        let portPart = port == scheme.defaultPort ? "" : ":\(port)"
        return "\(scheme.rawValue)://\(hostInURL)\(portPart)/\(app)"
    }

    /// `text` (something a server said) with the stream key, and the stream name without its query, replaced by
    /// `<key>` — each when it is 4 characters or more (shorter ones would mangle ordinary words): some servers
    /// quote the stream name in their status descriptions.
    public func hidingKey(in text: String) -> String {
        var result = text
        let name = streamKey.split(separator: "?", maxSplits: 1).first.map(String.init) ?? streamKey
        for secret in [streamKey, name] where secret.count >= 4 { result = result.replacing(secret, with: "<key>") }
        return result
    }

    /// The URL with the stream key hidden: safe for logs and errors.
    public var description: String { "\(tcUrl)/<key>" }
}
