/*
 * SPDX-License-Identifier: Apache-2.0
 *
 * pgval's crash point "after-sink-write": the driver dies after a micro-batch's sink wrote
 * its outputs and before Spark records the batch in the checkpoint's commit log.
 *
 * Spark writes commits/<N> only after the sink of batch N finished (MicroBatchExecution:
 * runBatch, then commitLog.add). Every checkpoint file goes through a CheckpointFileManager,
 * and spark.sql.streaming.checkpointFileManagerClass chooses which; Spark's own tests inject
 * failures the same way. This one is the default file manager, except while the file
 * named by the Hadoop setting pgval.crash.trigger exists ("armed"). Then, before it creates
 * offsets/<N> ("planned") and before it creates commits/<N> ("commit"), it writes
 * <trigger>.at (stage, batch) and waits for pgval's answer in <trigger>.answer, a line
 * "<stage> <N> go|halt" (an answer for another stage or batch is stale and ignored).
 * pgval needs both stops: at "planned" it notes how many records the output topic holds,
 * at "commit" whether batch N added any (a batch that closed no window wrote none, and
 * crashing there shows nothing) — no clocks compared. "halt" records N in <trigger>.hit
 * and halts the JVM at once (no shutdown hooks: a crash, not a stop): batch N's outputs
 * are in Kafka and nothing of N is committed, so a restart from the checkpoint re-runs N.
 * A disarmed trigger or 30 s without an answer: go on as usual.
 */
package pgval.hooks;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

public class CrashBeforeCommit extends FileContextBasedCheckpointFileManager {
    public static final String TRIGGER_KEY = "pgval.crash.trigger";
    private final String trigger;

    public CrashBeforeCommit(Path path, Configuration conf) {
        super(path, conf);
        this.trigger = conf.get(TRIGGER_KEY);
    }

    @Override
    public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(Path path,
                                                                          boolean overwrite) {
        String stage = stageOf(path);
        if (trigger != null && stage != null && Files.exists(Paths.get(trigger))
                && "halt".equals(ask(stage, path))) {
            crash(path);
        }
        return super.createAtomic(path, overwrite);
    }

    /** "planned" for offsets/N, "commit" for commits/N, "sink-log" for the file sink's
     *  _spark_metadata/N (written after the batch's data files, before its commit), null for
     *  any other file. */
    private static String stageOf(Path path) {
        Path parent = path.getParent();
        if (parent == null || !path.getName().matches("[0-9]+")) {
            return null;
        }
        switch (parent.getName()) {
            case "offsets": return "planned";
            case "commits": return "commit";
            case "_spark_metadata": return "sink-log";  // the file sink's own log
            default: return null;
        }
    }

    /** Say which batch is at which stage; pgval's verdict ("go" after 30 s unanswered). */
    private String ask(String stage, Path path) {
        java.nio.file.Path at = Paths.get(trigger + ".at");
        java.nio.file.Path answer = Paths.get(trigger + ".answer");
        String expected = stage + " " + path.getName() + " ";
        String verdict = "go";
        try {
            writeAtomically(at, describe(path, stage));
            long deadline = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < deadline && Files.exists(Paths.get(trigger))) {
                if (Files.exists(answer)) {
                    String line = new String(Files.readAllBytes(answer), StandardCharsets.UTF_8)
                            .trim();
                    Files.deleteIfExists(answer);
                    if (line.startsWith(expected)) {
                        verdict = line.substring(expected.length());
                        break;
                    }
                }
                Thread.sleep(2);
            }
            Files.deleteIfExists(at);
        } catch (IOException | InterruptedException e) {
            System.err.println("pgval: crash point hook: " + e);
        }
        return verdict;
    }

    private static String describe(Path path, String stage) {
        return "{\"stage\": \"" + stage + "\", \"batch\": " + path.getName()
                + ", \"file\": \""
                + path.toString().replace("\\", "\\\\").replace("\"", "\\\"")
                + "\", \"ts_ms\": " + System.currentTimeMillis() + "}\n";
    }

    private static void writeAtomically(java.nio.file.Path target, String text)
            throws IOException {
        java.nio.file.Path tmp = Paths.get(target + ".tmp");
        Files.write(tmp, text.getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE);
    }

    private void crash(Path path) {
        try {
            writeAtomically(Paths.get(trigger + ".hit"), describe(path, "commit"));
        } catch (IOException e) {
            System.err.println("pgval: could not record the crash point: " + e);
        }
        System.err.println("pgval: crash point after-sink-write: halting before " + path);
        System.err.flush();
        Runtime.getRuntime().halt(137);
    }
}
