import Foundation
import FuzzTargets
import Testing

/// The fuzz targets' seeds and every input a fuzz run ever failed on (Fuzz/regressions/TARGET/), replayed through the
/// same invariants libFuzzer checks (`make fuzz`): a broken one stops this process with the target's message.
@Suite struct FuzzRegressionTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Fuzz").standardized.path

    static func files(_ folder: String) -> [String] {
        let dir = "\(root)/\(folder)"
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [])
            .filter { !$0.hasPrefix(".") }.sorted().map { "\(dir)/\($0)" }
    }

    @Test(arguments: FuzzTarget.allCases) func seedsAndRegressionsKeepTheInvariants(target: FuzzTarget) throws {
        let seeds = Self.files("corpus/\(target.rawValue)")
        #expect(seeds.count >= 3, "\(target.rawValue): \(seeds.count) seeds in Fuzz/corpus (scripts/make-fuzz-corpus.py writes them)")
        #expect(FileManager.default.fileExists(atPath: "\(Self.root)/dictionaries/\(target.rawValue).dict"))
        for path in seeds + Self.files("regressions/\(target.rawValue)") {
            let data = try #require(FileManager.default.contents(atPath: path), "\(path)")
            target.run([UInt8](data))
        }
    }

    /// The corpus folders name exactly the targets (scripts/fuzz.sh runs one per folder).
    @Test func everyTargetHasACorpusAndNoOtherFolderIs() throws {
        let folders = try FileManager.default.contentsOfDirectory(atPath: "\(Self.root)/corpus").sorted()
        #expect(folders == FuzzTarget.allCases.map(\.rawValue).sorted())
    }
}
