/*
 * SPDX-License-Identifier: Apache-2.0
 *
 * pgval's crash point "during-sink-write": an executor dies while its sink task is writing,
 * after at least one of the task's output records is in Kafka and before the task finishes.
 *
 * Why inside the executor: when an executor is lost, Spark's TaskSetManager.executorLost
 * fails and re-queues the tasks that were *running* on it, while a finished result task is
 * not run again. A worker crash therefore duplicates a1's outputs only if it catches a
 * result task that has sent rows and not finished; watching from outside (the output topic
 * grows, then kill) mostly arrives after that task ended. This interceptor sits in the Kafka
 * sink's producer (kafka.interceptor.classes, set by pgval only for this crash point).
 * Kafka calls onAcknowledgement once a record is written, before the send's future is
 * complete, so the task's flush cannot have returned: halting here is a crash while the
 * task writes, with one of its records in Kafka.
 *
 * Armed while the file named by the producer setting pgval.sink.trigger exists. The first
 * executor whose record is acknowledged then claims <trigger>.claim (created atomically:
 * only one executor halts; pgval keeps the claim until it arms again), records in
 * <trigger>.hit what it wrote, in which micro-batch (the task's local property
 * streaming.sql.batchId, seen in onSend on the task's thread: a query runs one batch at a
 * time) and its own and its parent's pid (the parent is the worker JVM that forked it),
 * and halts its JVM at once (no shutdown hooks: a crash, not a stop). pgval then kills
 * that executor's worker. If the record cannot be written it does not halt.
 */
package pgval.hooks;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Map;

import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;

public class HaltOnSinkWrite implements ProducerInterceptor<byte[], byte[]> {
    public static final String TRIGGER_KEY = "pgval.sink.trigger";
    private Path trigger;
    private volatile String batch = "null";
    private volatile String task = "null";

    @Override
    public void configure(Map<String, ?> configs) {
        Object value = configs.get(TRIGGER_KEY);
        this.trigger = value == null || value.toString().isEmpty()
                ? null : Paths.get(value.toString());
    }

    @Override
    public ProducerRecord<byte[], byte[]> onSend(ProducerRecord<byte[], byte[]> record) {
        if (trigger != null) {
            org.apache.spark.TaskContext context = org.apache.spark.TaskContext.get();
            if (context != null) {
                String id = context.getLocalProperty("streaming.sql.batchId");
                batch = id != null && id.matches("[0-9]+") ? id : "null";
                task = "{\"stage\": " + context.stageId() + ", \"partition\": "
                        + context.partitionId() + ", \"attempt\": "
                        + context.attemptNumber() + "}";
            }
        }
        return record;
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
        if (trigger == null || exception != null || metadata == null
                || !Files.exists(trigger)) {
            return;
        }
        Path claim = Paths.get(trigger + ".claim");
        try {
            Files.createFile(claim);
        } catch (FileAlreadyExistsException e) {
            return;  // another executor is the one that halts
        } catch (IOException e) {
            System.err.println("pgval: sink-write hook: " + e);
            return;
        }
        ProcessHandle self = ProcessHandle.current();
        String text = "{\"pid\": " + self.pid()
                + ", \"parent_pid\": " + self.parent().map(p -> p.pid()).orElse(-1L)
                + ", \"executor\": \"" + executorId() + "\""
                + ", \"batch\": " + batch + ", \"task\": " + task
                + ", \"topic\": \"" + metadata.topic().replace("\"", "\\\"")
                + "\", \"partition\": " + metadata.partition()
                + ", \"offset\": " + metadata.offset()
                + ", \"ts_ms\": " + System.currentTimeMillis() + "}\n";
        try {
            Path tmp = Paths.get(trigger + ".hit.tmp");
            Files.write(tmp, text.getBytes(StandardCharsets.UTF_8));
            Files.move(tmp, Paths.get(trigger + ".hit"), StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {  // unrecorded, a halt would be a crash nobody can name
            System.err.println("pgval: could not record the crash point, not halting: " + e);
            try {
                Files.deleteIfExists(claim);
            } catch (IOException ignored) {
                // the claim stays: no executor halts this time, pgval reports it not reached
            }
            return;
        }
        System.err.println("pgval: crash point during-sink-write: halting after writing "
                + metadata.topic() + "-" + metadata.partition() + "@" + metadata.offset());
        System.err.flush();
        Runtime.getRuntime().halt(137);
    }

    private static String executorId() {
        try {
            return org.apache.spark.SparkEnv.get().executorId().replace("\"", "");
        } catch (RuntimeException | LinkageError e) {
            return "?";
        }
    }

    @Override
    public void close() {
    }
}
