import LiveAudio

/// Who may see and control the stage: the rules the server applies to every request, as a value to test alone.
///
/// - Bound to the loopback address (127.0.0.1, ::1 or localhost: the default) the stage is this computer's: no
///   token is needed. Bound to any other address, a token is: generated when not given, it is in the URL the
///   command prints; a page without it sees the stage but its controls are refused.
/// - The Host header must name the server as it was bound (or, bound to every address, an IP address, `localhost`
///   or this computer's name) with its port: a page of another site whose name was pointed at this address (DNS
///   rebinding) gets nothing.
/// - A WebSocket upgrade from a page must come from the stage's own origin (`http://` and the Host, `https://` on a
///   stage served over HTTPS); a client that sends no Origin (not a browser) is taken, token rules alike.
public struct StageAccess: Sendable, Equatable {
    /// The host the server was bound to, and its port once bound.
    public let host: String
    /// The port the server listens on; when port 0 was configured, the one the system gave, once bound.
    public var port: Int
    /// The token controls need; nil on loopback without one given.
    public let token: String?
    /// This computer's names, taken for the Host header when bound to every address.
    public let localNames: [String]
    /// The join address's token (a phone: a guest); nil: no guests.
    public var guestToken: String?
    /// Served over HTTPS: pages come from `https://` origins (port 443 when none is written).
    public var secure = false

    /// The rules for a server bound to `host` and `port`.
    /// - Parameters:
    ///   - host: The address the server was bound to (`127.0.0.1`, `::1`, `0.0.0.0`, a name, …).
    ///   - port: The port it listens on, which the Host header must name.
    ///   - token: The token controls need; nil: none needed.
    ///   - localNames: This computer's names, taken for the Host header when bound to every address; none by
    ///     default.
    public init(host: String, port: Int, token: String?, localNames: [String] = []) {
        self.host = host
        self.port = port
        self.token = token
        self.localNames = localNames
    }

    /// True for the addresses that keep the stage on this computer.
    public static func isLoopback(_ host: String) -> Bool {
        ["127.0.0.1", "::1", "[::1]", "localhost"].contains(host.lowercased())
    }

    /// True when bound to every address (0.0.0.0 or ::).
    var isWildcard: Bool { host == "0.0.0.0" || host == "::" || host == "[::]" }

    /// Whether a request's Host header (`request.head.authority`) names this server.
    public func allowsHost(_ authority: String?) -> Bool {
        guard let authority, let (name, port) = Self.split(authority, defaultPort: secure ? 443 : 80), port == self.port else { return false }
        let lower = name.lowercased()
        if Self.isLoopback(host) { return Self.isLoopback(lower) }
        if lower == host.lowercased() || "[" + lower + "]" == host.lowercased() { return true }
        if isWildcard {
            return Self.isIPLiteral(lower) || lower == "localhost" || localNames.contains { $0.lowercased() == lower }
        }
        return false
    }

    /// Whether a WebSocket upgrade's Origin (nil: none sent) may connect to a server reached as `authority`: the
    /// same scheme, host and port (80 written or not).
    public func allowsOrigin(_ origin: String?, authority: String?) -> Bool {
        guard let origin else { return true }
        let scheme = secure ? "https://" : "http://"
        let defaultPort = secure ? 443 : 80
        guard let authority, origin.lowercased().hasPrefix(scheme),
            let o = Self.split(String(origin.dropFirst(scheme.count)), defaultPort: defaultPort), let a = Self.split(authority, defaultPort: defaultPort)
        else { return false }
        return o.0.lowercased() == a.0.lowercased() && o.1 == a.1
    }

    /// Whether a connection that gave `token` (nil: none) may use the controls.
    public func mayControl(token given: String?) -> Bool {
        guard let token else { return true }
        guard let given else { return false }
        return Self.equal(token, given)
    }

    /// The role of a page that gave `token` and `guest` (nil: none): the host with the stage's token (or any page,
    /// when no token is needed), a guest with the join address's, else a viewer.
    public func role(token given: String?, guest: String?) -> StageRole {
        if mayControl(token: given) { return .host }
        if let guestToken, let guest, Self.equal(guestToken, guest) { return .guest }
        return .viewer
    }

    /// Two tokens compared in full whatever the first difference (no early exit to time).
    static func equal(_ token: String, _ given: String) -> Bool {
        let a = Array(token.utf8), b = Array(given.utf8)
        var diff = a.count ^ b.count
        for i in 0..<max(a.count, b.count) {
            diff |= Int((i < a.count ? a[i] : 0) ^ (i < b.count ? b[i] : 0))
        }
        return diff == 0
    }

    /// `name:port` or `[v6]:port`, split; without a port, `defaultPort` (what a browser leaves out: 80, 443 for HTTPS).
    static func split(_ authority: String, defaultPort: Int = 80) -> (String, Int)? {
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            let name = String(authority[authority.index(after: authority.startIndex)..<close])
            let rest = authority[authority.index(after: close)...]
            if rest.isEmpty { return (name, defaultPort) }
            guard rest.hasPrefix(":"), let port = Int(rest.dropFirst()) else { return nil }
            return (name, port)
        }
        guard let colon = authority.lastIndex(of: ":") else { return authority.isEmpty ? nil : (authority, defaultPort) }
        guard let port = Int(authority[authority.index(after: colon)...]) else { return nil }
        return (String(authority[..<colon]), port)
    }

    /// An IPv4 dotted quad or an IPv6 literal (what no DNS name can be).
    static func isIPLiteral(_ name: String) -> Bool {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 4, parts.allSatisfy({ p in p.count <= 3 && !p.isEmpty && p.allSatisfy(\.isNumber) && Int(p)! <= 255 }) {
            return true
        }
        return name.contains(":") && name.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." }
    }
}
