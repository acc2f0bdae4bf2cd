package dev.unaligned.shim;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

/**
 * Admin commands kafka-python cannot send, run with Kafka's own {@link Admin} client against the
 * embedded broker. One command per stdin line:
 *
 * <ul>
 *   <li>{@code DEFAULT-CLIENT-QUOTA <key> <value>}: set {@code key} (e.g. {@code producer_byte_rate})
 *       on the default client-id entity, then wait until the broker reports it.</li>
 *   <li>{@code DEFAULT-CLIENT-QUOTA <key> -}: remove {@code key} from the default client-id entity.</li>
 *   <li>{@code DEFAULT-USER-QUOTA <key> <value|->}: the same on the default user entity, which every
 *       client of one user shares (all unauthenticated clients are the user ANONYMOUS).</li>
 *   <li>{@code ACL <principal> <resource type> <pattern type> <name> <operation,...>}: allow
 *       {@code principal} (e.g. {@code User:alice}) the operations (Kafka's names, e.g.
 *       {@code WRITE,DESCRIBE,TWO_PHASE_COMMIT}) on the resource ({@code TOPIC},
 *       {@code TRANSACTIONAL_ID}, {@code GROUP}, {@code CLUSTER}; {@code LITERAL} or
 *       {@code PREFIXED}) from any host, then wait until the broker's authorizer shows them.</li>
 *   <li>{@code PING}: answers {@code PONG}.</li>
 * </ul>
 */
final class ShimCommands implements AutoCloseable {

    private static final long COMMAND_TIMEOUT_MS = 30_000;

    private final Admin admin;

    ShimCommands(String bootstrap) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "unaligned-shim");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) COMMAND_TIMEOUT_MS);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, (int) COMMAND_TIMEOUT_MS);
        this.admin = Admin.create(props);
    }

    /** Blocks until the broker answers describe-cluster with at least one live node. */
    void awaitServing(long timeoutMs) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        Exception last = null;
        while (System.currentTimeMillis() < deadline) {
            try {
                Collection<Node> nodes = admin.describeCluster().nodes().get(5, TimeUnit.SECONDS);
                if (!nodes.isEmpty()) {
                    return;
                }
            } catch (Exception e) {
                last = e;
            }
            Thread.sleep(50);
        }
        throw new IllegalStateException("broker did not serve metadata within " + timeoutMs + " ms", last);
    }

    /** Runs one command line and returns the reply text (without the status word). */
    String run(String line) throws Exception {
        String[] words = line.split("\\s+");
        switch (words[0]) {
            case "PING":
                return "PONG";
            case "DEFAULT-CLIENT-QUOTA":
            case "DEFAULT-USER-QUOTA":
                if (words.length != 3) {
                    throw new IllegalArgumentException("usage: " + words[0] + " <key> <value|->");
                }
                Double value = words[2].equals("-") ? null : Double.valueOf(words[2]);
                String entityType = words[0].equals("DEFAULT-USER-QUOTA")
                        ? ClientQuotaEntity.USER : ClientQuotaEntity.CLIENT_ID;
                return setDefaultQuota(entityType, words[1], value);
            case "ACL":
                if (words.length != 6) {
                    throw new IllegalArgumentException(
                            "usage: ACL <principal> <resource type> <pattern type> <name> <operation,...>");
                }
                return allow(words[1], new ResourcePattern(ResourceType.fromString(words[2]), words[4],
                        PatternType.fromString(words[3])), words[5].split(","));
            default:
                throw new IllegalArgumentException("unknown command: " + words[0]);
        }
    }

    private String setDefaultQuota(String entityType, String key, Double value) throws Exception {
        Map<String, String> entries = new HashMap<>();
        entries.put(entityType, null); // null name = the default entity
        ClientQuotaEntity entity = new ClientQuotaEntity(entries);
        ClientQuotaAlteration alteration = new ClientQuotaAlteration(
                entity, List.of(new ClientQuotaAlteration.Op(key, value)));
        admin.alterClientQuotas(List.of(alteration)).all().get(COMMAND_TIMEOUT_MS, TimeUnit.MILLISECONDS);

        // The alteration is applied through the metadata log: wait until the broker shows it.
        ClientQuotaFilter filter = ClientQuotaFilter.containsOnly(
                List.of(ClientQuotaFilterComponent.ofDefaultEntity(entityType)));
        long deadline = System.currentTimeMillis() + COMMAND_TIMEOUT_MS;
        while (true) {
            Map<ClientQuotaEntity, Map<String, Double>> described =
                    admin.describeClientQuotas(filter).entities().get(COMMAND_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            Double current = described.getOrDefault(entity, Collections.emptyMap()).get(key);
            if (value == null ? current == null : value.equals(current)) {
                return key + "=" + (value == null ? "-" : value.toString());
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("quota " + key + " not applied within "
                        + COMMAND_TIMEOUT_MS + " ms (broker shows " + current + ")");
            }
            Thread.sleep(20);
        }
    }

    private String allow(String principal, ResourcePattern resource, String[] operations) throws Exception {
        if (resource.resourceType() == ResourceType.UNKNOWN || resource.patternType() == PatternType.UNKNOWN) {
            throw new IllegalArgumentException("unknown resource " + resource);
        }
        List<AclBinding> bindings = new ArrayList<>();
        for (String name : operations) {
            AclOperation operation = AclOperation.fromString(name);
            if (operation == AclOperation.UNKNOWN) {
                throw new IllegalArgumentException("unknown ACL operation " + name);
            }
            bindings.add(new AclBinding(resource,
                    new AccessControlEntry(principal, "*", operation, AclPermissionType.ALLOW)));
        }
        admin.createAcls(bindings).all().get(COMMAND_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        // ACLs reach the authorizer through the metadata log: wait until the broker shows them.
        AclBindingFilter filter = new AclBindingFilter(resource.toFilter(),
                new AccessControlEntryFilter(principal, null, AclOperation.ANY, AclPermissionType.ANY));
        long deadline = System.currentTimeMillis() + COMMAND_TIMEOUT_MS;
        while (true) {
            Collection<AclBinding> shown =
                    admin.describeAcls(filter).values().get(COMMAND_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            if (shown.containsAll(bindings)) {
                return bindings.size() + " ACL(s) for " + principal;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("ACLs not shown within " + COMMAND_TIMEOUT_MS + " ms");
            }
            Thread.sleep(20);
        }
    }

    @Override
    public void close() {
        admin.close(java.time.Duration.ofSeconds(5));
    }
}
