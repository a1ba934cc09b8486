import AudioCore
import Crypto
import FoundationEssentials
import SwiftASN1
import X509

#if canImport(Glibc)
import Glibc
#endif

/// The stage's own certificate, for HTTPS on a local network, where no certificate authority knows the room's
/// address: made here (an ECDSA P-256 key, self-signed, through swift-crypto and swift-certificates), kept in the
/// user's data folder with the key readable by the user alone, and used again while it is valid for another week
/// and names the address the stage serves. A phone's browser warns once about a certificate it cannot check; the
/// SHA-256 ``fingerprint`` the tool prints is what the warning's details show, for whoever wants to compare.
public struct StageCertificate: Sendable, Equatable {
    /// The certificate, PEM.
    public let certificatePEM: String
    /// Its private key, PEM (PKCS #8).
    public let keyPEM: String
    /// The SHA-256 fingerprint of the certificate (its DER bytes), as colon-separated upper-case hex pairs.
    public let fingerprint: String
    /// The addresses and names it is for.
    public let names: [String]
    /// Whether it was made by this call (false: read from the folder).
    public let isNew: Bool

    /// How long a made certificate is valid: a year.
    public static let validity: Double = 365 * 86_400
    /// A kept certificate is made anew when it has less than this left: a week.
    public static let renewal: Double = 7 * 86_400

    /// The folder certificates are kept in when none is named: `$XDG_DATA_HOME/liveaudio/stage`, else
    /// `$HOME/.local/share/liveaudio/stage`.
    public static func defaultFolder(environment: [String: String]) -> String {
        if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") { return data + "/liveaudio/stage" }
        return (environment["HOME"] ?? "/tmp") + "/.local/share/liveaudio/stage"
    }

    /// The certificate kept in `folder` (`certificate.pem`, `key.pem`) when it names every one of `names` and is
    /// valid for another week; else a new one, written there (the key with mode 0600, the folder 0700), for `names`
    /// and the names of the one kept (while valid).
    /// - Parameters:
    ///   - names: IP addresses (v4 or v6) and DNS names the stage is reached by.
    ///   - folder: where it is kept.
    ///   - now: the time (seconds since 1970), for the validity.
    /// - Throws: ``/AudioCore/AudioError`` `.fileIO` when the folder cannot be made or written, `.invalidParameter`
    ///   for no names.
    public static func kept(for names: [String], in folder: String, now: Double = Date().timeIntervalSince1970) throws(AudioError) -> StageCertificate {
        guard !names.isEmpty else { throw AudioError(.invalidParameter, "a certificate for no address") }
        let certificatePath = folder + "/certificate.pem", keyPath = folder + "/key.pem"
        var wanted = names
        if let pem = try? String(contentsOfFile: certificatePath, encoding: .utf8), let key = try? String(contentsOfFile: keyPath, encoding: .utf8),
            let kept = try? Self(certificatePEM: pem, keyPEM: key, isNew: false), let end = try? Certificate(pemEncoded: pem).notValidAfter,
            end.timeIntervalSince1970 - now > renewal
        {
            if Set(names).isSubset(of: Set(kept.names)) { return kept }
            // A new address: the new certificate names the old ones too (a stage moved between networks and back is
            // not warned about again).
            wanted = kept.names + names.filter { !kept.names.contains($0) }
        }
        let made = try make(for: wanted, now: now)
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            _ = chmod(folder, 0o700)
            // The key first, created unreadable to others before a byte is in it (and not through a link planted there).
            let fd = open(keyPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard fd >= 0 else { throw AudioError(.fileIO, "cannot write '\(keyPath)': \(String(cString: strerror(errno)))") }
            _ = fchmod(fd, 0o600)
            let bytes = Array(made.keyPEM.utf8)
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
            guard written == bytes.count else { throw AudioError(.fileIO, "cannot write '\(keyPath)'") }
            try made.certificatePEM.write(toFile: certificatePath, atomically: true, encoding: .utf8)
        } catch let error as AudioError {
            throw error
        } catch {
            throw AudioError(.fileIO, "cannot keep the stage's certificate in '\(folder)': \(error)")
        }
        return made
    }

    /// A new certificate for `names`, valid for ``validity`` from `now`.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for no names or a name that is neither an address nor a
    ///   DNS name.
    public static func make(for names: [String], now: Double = Date().timeIntervalSince1970) throws(AudioError) -> StageCertificate {
        guard !names.isEmpty else { throw AudioError(.invalidParameter, "a certificate for no address") }
        do {
            let key = P256.Signing.PrivateKey()
            let issuerKey = Certificate.PrivateKey(key)
            let subject = try DistinguishedName {
                OrganizationName("LiveAudio")
                CommonName("LiveAudio stage \(names[0])")
            }
            var alternatives: [GeneralName] = []
            for name in names {
                if let address = Self.addressBytes(name) {
                    alternatives.append(.ipAddress(ASN1OctetString(contentBytes: ArraySlice(address))))
                } else if !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") }) {
                    alternatives.append(.dnsName(name))
                } else {
                    throw AudioError(.invalidParameter, "'\(name)' is neither an address nor a host name for the stage's certificate")
                }
            }
            let extensions = try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames(alternatives)
            }
            let start = Date(timeIntervalSince1970: now - 3600)
            let certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: issuerKey.publicKey, notValidBefore: start,
                notValidAfter: start.addingTimeInterval(validity + 3600), issuer: subject, subject: subject, signatureAlgorithm: .ecdsaWithSHA256,
                extensions: extensions, issuerPrivateKey: issuerKey)
            return try Self(certificatePEM: try certificate.serializeAsPEM().pemString, keyPEM: key.pemRepresentation, isNew: true)
        } catch let error as AudioError {
            throw error
        } catch {
            throw AudioError(.invalidParameter, "cannot make the stage's certificate: \(error)")
        }
    }

    /// A certificate and key given as PEM (`--web-cert`, `--web-key`), checked: the key must be the certificate's.
    /// - Throws: ``/AudioCore/AudioError`` `.invalidParameter` for text that is not a certificate or a key, or a key
    ///   that is not the certificate's.
    public init(certificatePEM: String, keyPEM: String) throws(AudioError) {
        try self.init(certificatePEM: certificatePEM, keyPEM: keyPEM, isNew: false)
    }

    private init(certificatePEM: String, keyPEM: String, isNew: Bool) throws(AudioError) {
        let certificate: Certificate
        do { certificate = try Certificate(pemEncoded: certificatePEM) } catch {
            throw AudioError(.invalidParameter, "the stage's certificate is not a PEM certificate: \(error)")
        }
        let key: Certificate.PrivateKey
        do { key = try Certificate.PrivateKey(pemEncoded: keyPEM) } catch {
            throw AudioError(.invalidParameter, "the stage's key is not a PEM private key: \(error)")
        }
        guard key.publicKey == certificate.publicKey else {
            throw AudioError(.invalidParameter, "the stage's key is not the certificate's (they were made apart)")
        }
        var serializer = DER.Serializer()
        do { try serializer.serialize(certificate) } catch {
            throw AudioError(.invalidParameter, "the stage's certificate cannot be written back: \(error)")
        }
        self.certificatePEM = certificatePEM
        self.keyPEM = keyPEM
        self.isNew = isNew
        fingerprint = SHA256.hash(data: serializer.serializedBytes).map { byte in
            let h = String(byte, radix: 16, uppercase: true)
            return h.count == 1 ? "0" + h : h
        }.joined(separator: ":")
        var names: [String] = []
        if let alternatives = try? certificate.extensions.subjectAlternativeNames {
            for name in alternatives {
                switch name {
                case .dnsName(let d): names.append(d)
                case .ipAddress(let bytes): names.append(Self.addressText(Array(bytes.bytes)))
                default: break
                }
            }
        }
        self.names = names
    }

    /// An address's bytes (4 for IPv4, 16 for IPv6; brackets allowed), or nil for a name.
    static func addressBytes(_ text: String) -> [UInt8]? {
        let bare = text.hasPrefix("[") && text.hasSuffix("]") ? String(text.dropFirst().dropLast()) : text
        var v4 = in_addr()
        if inet_pton(AF_INET, bare, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, bare, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }

    /// An address's text from its bytes.
    static func addressText(_ bytes: [UInt8]) -> String {
        var text = [CChar](repeating: 0, count: 64)
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        return bytes.withUnsafeBytes { raw in
            inet_ntop(family, raw.baseAddress, &text, socklen_t(text.count)) == nil
                ? "" : String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }
}
