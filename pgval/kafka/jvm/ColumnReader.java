import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.DataOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * pgval's bulk read-back (pgval/kafka/jvm_reader.py): offset ranges of Kafka partitions, read
 * with Kafka's Java consumer and written to stdout as column chunks, so Python never makes an
 * object per record.
 *
 * <p>stdin, tab-separated lines: {@code conf KEY VALUE} (consumer settings), {@code limits
 * TIMEOUT_MS IDLE_MS}, {@code task TOPIC PARTITION START END} (at most one per partition), then
 * {@code go}. The settings arrive on stdin so a password is on no command line and in no file.
 *
 * <p>stdout, little-endian frames: {@code 'C'} n, key bytes, value bytes (int32, int64, int64),
 * then int64 offset[n], int64 timestamp[n], int32 partition[n], int32 keyLength[n] (-1: null),
 * int32 valueLength[n], the keys, the values; {@code 'T'} int32 length + UTF-8 JSON {"topic",
 * "reached": {partition: offset}, "problems": [...]} when a topic is done; {@code 'D'} at the end.
 * The chunks before a 'T' are that topic's records, in the order the consumer returned them.
 *
 * <p>The proof is the consumer's position: with read_committed it moves past aborted records and
 * transaction markers too, so a partition is read when its position reaches its end offset
 * (the high watermark Python took beforehand, once every transaction below it was settled).
 * A read stops short at the time-out, when nothing moved for IDLE_MS, or on a Kafka error,
 * and says which in "problems".
 */
public final class ColumnReader {
    private static final int CHUNK_RECORDS = 65_536;
    private static final int CHUNK_BYTES = 16 << 20;

    private final DataOutputStream out;
    private int n;
    private int[] parts = new int[CHUNK_RECORDS];
    private long[] offsets = new long[CHUNK_RECORDS];
    private long[] stamps = new long[CHUNK_RECORDS];
    private int[] keyLens = new int[CHUNK_RECORDS];
    private int[] valueLens = new int[CHUNK_RECORDS];
    private byte[] keys = new byte[1 << 20];
    private int keyBytes;
    private byte[] values = new byte[CHUNK_BYTES];
    private int valueBytes;
    private ByteBuffer scratch = ByteBuffer.allocate(1 << 20).order(ByteOrder.LITTLE_ENDIAN);

    private ColumnReader(DataOutputStream out) {
        this.out = out;
    }

    public static void main(String[] args) throws IOException {
        Properties conf = new Properties();
        long timeoutMs = 120_000, idleMs = 10_000;
        Map<String, Map<Integer, long[]>> tasks = new LinkedHashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while (!"go".equals(line = in.readLine())) {
            if (line == null) {
                throw new IllegalArgumentException("the input ended before 'go'");
            }
            String[] f = line.split("\t", -1);
            switch (f[0]) {
                case "conf" -> conf.setProperty(f[1], f[2]);
                case "limits" -> {
                    timeoutMs = Long.parseLong(f[1]);
                    idleMs = Long.parseLong(f[2]);
                }
                case "task" -> tasks.computeIfAbsent(f[1], t -> new LinkedHashMap<>())
                        .put(Integer.parseInt(f[2]), new long[] {Long.parseLong(f[3]), Long.parseLong(f[4])});
                default -> throw new IllegalArgumentException("unknown input line: " + f[0]);
            }
        }
        conf.setProperty("key.deserializer", ByteArrayDeserializer.class.getName());
        conf.setProperty("value.deserializer", ByteArrayDeserializer.class.getName());
        conf.setProperty("enable.auto.commit", "false");
        // A position that falls out of the log (records deleted, the log truncated) must be
        // an error, a problem of the read: a reset policy would jump over or re-read records.
        conf.setProperty("auto.offset.reset", "none");
        // Frames go to the process's stdout; anything else printing there (a logger's
        // console appender) is sent to stderr so it cannot corrupt them.
        DataOutputStream out = new DataOutputStream(new BufferedOutputStream(
                new FileOutputStream(FileDescriptor.out), 1 << 20));
        System.setOut(System.err);
        ColumnReader reader = new ColumnReader(out);
        // One consumer for every topic, one topic at a time: its connections and login
        // are made once.
        KafkaConsumer<byte[], byte[]> consumer = null;
        try {
            consumer = new KafkaConsumer<>(conf);
        } catch (RuntimeException exc) {
            startProblem = "Kafka error: " + exc;
        }
        for (Map.Entry<String, Map<Integer, long[]>> e : tasks.entrySet()) {
            reader.readTopic(consumer, e.getKey(), e.getValue(), timeoutMs, idleMs);
        }
        if (consumer != null) {
            consumer.close(Duration.ZERO);
        }
        out.writeByte('D');
        out.flush();
    }

    private static String startProblem;

    /**
     * One topic's ranges, its chunks and then its 'T' frame; every failure is a problem. Each
     * topic has TIMEOUT_MS of its own, as the librdkafka reader gives each.
     */
    private void readTopic(KafkaConsumer<byte[], byte[]> consumer, String topic,
                           Map<Integer, long[]> ranges, long timeoutMs, long idleMs)
            throws IOException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        Map<Integer, Long> reached = new HashMap<>();
        List<String> problems = new ArrayList<>();
        TreeSet<Integer> todo = new TreeSet<>();
        for (Map.Entry<Integer, long[]> r : ranges.entrySet()) {
            reached.put(r.getKey(), r.getValue()[0]);
            if (r.getValue()[1] > r.getValue()[0]) {
                todo.add(r.getKey());
            }
        }
        try {
            if (consumer == null) {
                throw new IllegalStateException(startProblem);
            }
            List<TopicPartition> assigned = new ArrayList<>();
            for (int p : todo) {
                assigned.add(new TopicPartition(topic, p));
            }
            consumer.assign(assigned);
            for (TopicPartition tp : assigned) {
                consumer.seek(tp, ranges.get(tp.partition())[0]);
            }
            long lastMove = System.currentTimeMillis();
            while (!todo.isEmpty()) {
                long now = System.currentTimeMillis();
                if (now > deadline) {
                    problems.add(String.format("read time-out after %d s", timeoutMs / 1000));
                    break;
                }
                if (now - lastMove > idleMs) {
                    problems.add(String.format("nothing arrived for %d s", idleMs / 1000));
                    break;
                }
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> rec : batch) {
                    long[] range = rec.topic().equals(topic) ? ranges.get(rec.partition()) : null;
                    if (range != null && rec.offset() >= range[0] && rec.offset() < range[1]) {
                        add(rec);
                    }
                }
                for (int p : new ArrayList<>(todo)) {
                    TopicPartition tp = new TopicPartition(topic, p);
                    long end = ranges.get(p)[1];
                    long at = Math.min(consumer.position(tp), end);
                    if (at > reached.get(p)) {
                        reached.put(p, at);
                        lastMove = System.currentTimeMillis();
                    }
                    if (at >= end) {
                        todo.remove(p);
                        consumer.pause(List.of(tp));
                    }
                }
            }
        } catch (IllegalStateException exc) {
            problems.add(String.valueOf(exc.getMessage()));
        } catch (RuntimeException exc) {
            problems.add("Kafka error: " + exc);
        }
        flush();
        byte[] json = topicJson(topic, reached, problems).getBytes(StandardCharsets.UTF_8);
        out.writeByte('T');
        out.writeInt(Integer.reverseBytes(json.length));
        out.write(json);
        out.flush();
    }

    private void add(ConsumerRecord<byte[], byte[]> rec) throws IOException {
        byte[] k = rec.key(), v = rec.value();
        int kl = k == null ? 0 : k.length, vl = v == null ? 0 : v.length;
        if (n == CHUNK_RECORDS || (n > 0 && (valueBytes + vl > CHUNK_BYTES
                || keyBytes + kl > CHUNK_BYTES))) {
            flush();
        }
        parts[n] = rec.partition();
        offsets[n] = rec.offset();
        stamps[n] = rec.timestamp();
        keyLens[n] = k == null ? -1 : kl;
        valueLens[n] = v == null ? -1 : vl;
        keys = append(keys, keyBytes, k);
        keyBytes += kl;
        values = append(values, valueBytes, v);
        valueBytes += vl;
        n++;
    }

    private static byte[] append(byte[] into, int at, byte[] data) {
        if (data == null) {
            return into;
        }
        if (at + data.length > into.length) {
            into = Arrays.copyOf(into, Math.max(into.length * 2, at + data.length));
        }
        System.arraycopy(data, 0, into, at, data.length);
        return into;
    }

    private void flush() throws IOException {
        if (n == 0) {
            return;
        }
        out.writeByte('C');
        ByteBuffer head = buffer(20);
        head.putInt(n).putLong(keyBytes).putLong(valueBytes);
        out.write(head.array(), 0, head.position());
        ByteBuffer b = buffer(n * 28);  // the 8-byte columns first: aligned in Python
        for (int i = 0; i < n; i++) b.putLong(offsets[i]);
        for (int i = 0; i < n; i++) b.putLong(stamps[i]);
        for (int i = 0; i < n; i++) b.putInt(parts[i]);
        for (int i = 0; i < n; i++) b.putInt(keyLens[i]);
        for (int i = 0; i < n; i++) b.putInt(valueLens[i]);
        out.write(b.array(), 0, b.position());
        out.write(keys, 0, keyBytes);
        out.write(values, 0, valueBytes);
        n = 0;
        keyBytes = 0;
        valueBytes = 0;
    }

    private ByteBuffer buffer(int size) {
        if (scratch.capacity() < size) {
            scratch = ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
        }
        scratch.clear();
        return scratch;
    }

    private static String topicJson(String topic, Map<Integer, Long> reached, List<String> problems) {
        StringBuilder s = new StringBuilder("{\"topic\":").append(quote(topic)).append(",\"reached\":{");
        String sep = "";
        for (Map.Entry<Integer, Long> r : new java.util.TreeMap<>(reached).entrySet()) {
            s.append(sep).append('"').append(r.getKey()).append("\":").append(r.getValue());
            sep = ",";
        }
        s.append("},\"problems\":[");
        sep = "";
        for (String p : problems) {
            s.append(sep).append(quote(p));
            sep = ",";
        }
        return s.append("]}").toString();
    }

    private static String quote(String text) {
        StringBuilder s = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                s.append('\\').append(c);
            } else if (c < 0x20) {
                s.append(String.format("\\u%04x", (int) c));
            } else {
                s.append(c);
            }
        }
        return s.append('"').toString();
    }
}
