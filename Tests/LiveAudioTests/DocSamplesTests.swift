import Foundation
import Testing
import TestSupport

/// The Swift samples in the README, docs/ and the doc comments compile: the DocSamples target holds them, built with
/// the tests; this checks it holds them as the docs show them now.
@Suite struct DocSamplesTests {
    @Test func theDocsSamplesAreTheOnesCompiled() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized.path
        let r = try runProcess("python3", [root + "/scripts/doc-samples.py", "--check"])
        #expect(r.status == 0, "\(r.stderr)\(r.stdout)")
    }
}
