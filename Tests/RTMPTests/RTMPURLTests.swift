import LiveAudio
import Testing

@Suite("RTMP URLs")
struct RTMPURLTests {
    /// A key distinctive enough that finding it in a message cannot be a coincidence.
    static let key = "SECRETKEY123"

    /// The error `RTMPURL(string)` throws, or nil when it parses.
    static func parseError(_ string: String) -> AudioError? {
        do throws(AudioError) {
            _ = try RTMPURL(string)
            return nil
        } catch {
            return error
        }
    }

    @Test("rtmp://host/app/key: the host, port 1935, the application and the key")
    func plain() throws {
        let url = try RTMPURL("rtmp://live.example.com/live/\(Self.key)")
        #expect(url.scheme == .rtmp)
        #expect(url.host == "live.example.com")
        #expect(url.port == 1935)
        #expect(url.app == "live")
        #expect(url.streamKey == Self.key)
        #expect(url.tcUrl == "rtmp://live.example.com/live")
    }

    @Test("rtmps:// defaults to port 443")
    func rtmpsDefaultsTo443() throws {
        let url = try RTMPURL("rtmps://live.example.com/live/\(Self.key)")
        #expect(url.scheme == .rtmps)
        #expect(url.port == 443)
        #expect(url.app == "live" && url.streamKey == Self.key)
        #expect(url.tcUrl == "rtmps://live.example.com/live")
        #expect(RTMPURL.Scheme.rtmp.defaultPort == 1935 && RTMPURL.Scheme.rtmps.defaultPort == 443)
    }

    @Test("An explicit port is used, and tcUrl keeps it when it is not the scheme's default")
    func explicitPort() throws {
        let url = try RTMPURL("rtmp://live.example.com:1940/live/\(Self.key)")
        #expect(url.port == 1940)
        #expect(url.host == "live.example.com")
        #expect(url.tcUrl == "rtmp://live.example.com:1940/live")
        // 1935 is only the default for rtmp; over rtmps it must be written out, and 443 over rtmp too.
        #expect(try RTMPURL("rtmps://h:1935/live/k").tcUrl == "rtmps://h:1935/live")
        #expect(try RTMPURL("rtmp://h:443/live/k").tcUrl == "rtmp://h:443/live")
    }

    @Test("Everything between the host and the last segment is the application: rtmp://h/app/inst/key → app/inst")
    func applicationWithInstance() throws {
        let url = try RTMPURL("rtmp://h/app/inst/\(Self.key)")
        #expect(url.app == "app/inst")
        #expect(url.streamKey == Self.key)
        #expect(url.tcUrl == "rtmp://h/app/inst")
    }

    @Test("A query string stays with the stream key: rtmp://h/live/key?token=abc → key?token=abc")
    func queryStaysWithTheKey() throws {
        let url = try RTMPURL("rtmp://h/live/\(Self.key)?token=abc")
        #expect(url.app == "live")
        #expect(url.streamKey == "\(Self.key)?token=abc")
        #expect(url.tcUrl == "rtmp://h/live")
        #expect(!url.description.contains("token"))
    }

    @Test("An IPv6 address in brackets with a port: the host is stored without brackets and written with them")
    func ipv6() throws {
        let url = try RTMPURL("rtmp://[::1]:1936/live/\(Self.key)")
        #expect(url.host == "::1")
        #expect(url.port == 1936)
        #expect(url.app == "live" && url.streamKey == Self.key)
        #expect(url.tcUrl == "rtmp://[::1]:1936/live")
        let defaultPort = try RTMPURL("rtmp://[2001:db8::5]/live/\(Self.key)")
        #expect(defaultPort.host == "2001:db8::5" && defaultPort.port == 1935)
        #expect(defaultPort.tcUrl == "rtmp://[2001:db8::5]/live")
    }

    @Test("The scheme is case-insensitive: RTMP:// and RTMPS:// are accepted")
    func uppercaseScheme() throws {
        let rtmp = try RTMPURL("RTMP://h/live/\(Self.key)")
        #expect(rtmp.scheme == .rtmp && rtmp.port == 1935)
        #expect(rtmp.tcUrl == "rtmp://h/live")
        let rtmps = try RTMPURL("RtmpS://h/live/\(Self.key)")
        #expect(rtmps.scheme == .rtmps && rtmps.port == 443)
    }

    @Test("tcUrl leaves out the default port and the key")
    func tcUrlOmitsDefaultPortAndKey() throws {
        let url = try RTMPURL("rtmp://h:1935/app/inst/\(Self.key)?token=abc")
        #expect(url.port == 1935)
        #expect(url.tcUrl == "rtmp://h/app/inst")
        #expect(!url.tcUrl.contains(Self.key))
        #expect(try RTMPURL("rtmps://h:443/live/\(Self.key)").tcUrl == "rtmps://h/live")
    }

    @Test("description shows the URL with the key replaced by <key>, and never the key")
    func descriptionHidesTheKey() throws {
        let url = try RTMPURL("rtmp://h:1940/live/\(Self.key)?token=abc")
        #expect(url.description == "rtmp://h:1940/live/<key>")
        #expect(!"\(url)".contains(Self.key))
        #expect(!String(describing: url).contains(Self.key))
        let plain = try RTMPURL("rtmps://h/app/inst/\(Self.key)")
        #expect(plain.description == "rtmps://h/app/inst/<key>")
        #expect(!plain.description.contains(Self.key))
    }

    /// Unusable URLs, each with a fragment of the message that says what is wrong.
    static let invalid: [(url: String, fragment: String)] = [
        ("http://h/live/\(key)", "scheme is 'http'"),
        ("HTTPS://h/live/\(key)", "scheme is 'https'"),
        ("h/live/\(key)", "no scheme"),
        ("rtmp:/h/live/\(key)", "no scheme"),
        ("rtmp://h/live", "no stream key"),
        ("rtmp://h/", "no application"),
        ("rtmp://h", "no application"),
        ("rtmp://h//\(key)", "no application"),
        ("rtmp://h/live/", "stream key is empty"),
        ("rtmp://h/live//\(key)", "empty segment"),
        ("rtmp://h:0/live/\(key)", "port '0'"),
        ("rtmp://h:70000/live/\(key)", "port '70000'"),
        ("rtmp://h:abc/live/\(key)", "port 'abc'"),
        ("rtmp://h:/live/\(key)", "port ''"),
        ("rtmp://user:pass@h/live/\(key)", "passwords"),
        ("rtmp://h/my live/\(key)", "spaces"),
        ("rtmp://h/live/\(key) ", "spaces"),
        ("rtmp://h/live/\(key)\n", "control characters"),
        ("rtmp:///live/\(key)", "no host"),
        ("rtmp://:1935/live/\(key)", "no host"),
        ("rtmp://[]/live/\(key)", "no host"),
        ("rtmp://[::1/live/\(key)", "closing ']'"),
        ("rtmp://[::1]x/live/\(key)", "after the IPv6 address"),
        // Found by reading for the fuzz targets: '[x' was taken for a host, and its tcUrl did not parse.
        ("rtmp://[[x]/live/\(key)", "not an IPv6 address"),
        ("rtmp://[example.com]/live/\(key)", "not an IPv6 address"),
        ("rtmp://[fe80::1%]/live/\(key)", "not an IPv6 address"),
        ("rtmp://h]x/live/\(key)", "bracket"),
    ]

    @Test("Unusable URLs are an .invalidURL error that says what is wrong and never contains the key")
    func invalidURLs() {
        for (url, fragment) in Self.invalid {
            guard let error = Self.parseError(url) else {
                Issue.record("accepted \(url.debugDescription)")
                continue
            }
            #expect(error.code == .invalidURL, "\(url.debugDescription): \(error)")
            #expect(error.message.contains(fragment), "\(url.debugDescription): \(error.message)")
            #expect(error.message.contains("rtmp://host"), "the message shows the expected form: \(error.message)")
            #expect(!error.message.lowercased().contains(Self.key.lowercased()), "\(url.debugDescription) leaks the key")
            #expect(!error.description.lowercased().contains(Self.key.lowercased()))
        }
    }

    @Test("A URL without a scheme but with another URL in its query string does not leak the key either")
    func schemeLessURLWithURLInQuery() throws {
        let error = try #require(Self.parseError("h/live/\(Self.key)?next=rtmp://other/x"))
        #expect(error.code == .invalidURL)
        #expect(!error.message.lowercased().contains(Self.key.lowercased()), "\(error.message)")
    }
}
