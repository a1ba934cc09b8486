import ArgumentParser
import LiveAudio
import LiveAudioStage

/// `--web [HOST:]PORT` and `--web-token`: the stage, a web page for the room, while `karaoke` or `stream` runs.
struct StageOptions: ParsableArguments {
    @Option(
        name: .customLong("web"),
        help: "Serve the stage — a web page with the lyrics, meters and controls — at [HOST:]PORT (host 127.0.0.1 unless given; port 0: any free one). The address is printed.")
    var web: String?

    @Option(
        name: .customLong("web-token"),
        help: "The token the stage's controls need (default: none on 127.0.0.1; on any other address one is generated and printed in the address).")
    var webToken: String?

    /// The stage's configuration, or nil without --web.
    func configuration() throws(AudioError) -> StageConfiguration? {
        guard let web else {
            if webToken != nil { throw AudioError(.invalidParameter, "--web-token needs --web") }
            return nil
        }
        var c = try StageConfiguration(parsing: web)
        if let webToken {
            guard webToken.count >= 8, webToken.count <= 128, webToken.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw AudioError(.invalidParameter, "--web-token must be 8 … 128 letters, digits, - or _")
            }
            c.token = webToken
        }
        return c
    }
}
