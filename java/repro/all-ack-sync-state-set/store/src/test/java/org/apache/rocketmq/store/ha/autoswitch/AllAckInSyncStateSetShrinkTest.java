/*
 * Licensed to the Apache Software Foundation (ASF) under one or more
 * contributor license agreements.  See the NOTICE file distributed with
 * this work for additional information regarding copyright ownership.
 * The ASF licenses this file to You under the Apache License, Version 2.0
 * (the "License"); you may not use this file except in compliance with
 * the License.  You may obtain a copy of the License at
 *
 *     http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS,
 * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 * See the License for the specific language governing permissions and
 * limitations under the License.
 */

package org.apache.rocketmq.store.ha.autoswitch;

import java.io.File;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.UtilAll;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageStatus;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import org.junit.After;
import org.junit.Before;
import org.junit.Test;

import static org.awaitility.Awaitility.await;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

/**
 * allAckInSyncStateSet=true: a SYNC put is acknowledged once every replica of the SyncStateSet has it.
 * When a slave's HA connection closes, the master asks the controller to shrink the SyncStateSet
 * (removeConnection marks the shrunk set as in flight and notifies the listeners, the broker's
 * ReplicasManager sends it to the controller). The shrink takes effect only once the controller accepts it
 * (setSyncStateSet; #5663, #5798): until then the set the acks wait for still holds the slave. Here only the
 * stores run, so no controller ever answers, as when the controller refuses or cannot be reached.
 */
public class AllAckInSyncStateSetShrinkTest {
    private static final long MASTER_ID = 1L;
    private static final long SLAVE_ID = 2L;

    private final String storeRoot = System.getProperty("java.io.tmpdir") + File.separator
        + "AllAckInSyncStateSetShrinkTest-" + UUID.randomUUID();
    private final BrokerStatsManager brokerStatsManager =
        new BrokerStatsManager("AllAckInSyncStateSetShrinkTest", true);
    private DefaultMessageStore master;
    private DefaultMessageStore slave;

    @Before
    public void setUp() throws Exception {
        int masterHaPort = freePort();
        master = buildMessageStore("master", MASTER_ID, BrokerRole.SYNC_MASTER, masterHaPort);
        slave = buildMessageStore("slave", SLAVE_ID, BrokerRole.SLAVE, freePort());
        assertTrue(master.load());
        assertTrue(slave.load());
        master.start();
        slave.start();

        // What the controller holds: epoch 1, master 1, SyncStateSet {1, 2}
        assertTrue(master.getHaService().changeToMaster(1));
        masterHAService().setSyncStateSet(syncStateSet(MASTER_ID, SLAVE_ID));
        assertTrue(slave.getHaService().changeToSlave("", 1, SLAVE_ID));
        slave.getHaService().updateHaMasterAddress("127.0.0.1:" + masterHaPort);

        // Replicated: the put is acknowledged once the slave has it
        master.getMessageStoreConfig().setSlaveTimeout(10_000);
        assertEquals(PutMessageStatus.PUT_OK, master.putMessage(buildMessage()).getPutMessageStatus());
    }

    @Test
    public void testShrinkTakesEffectOnlyWhenControllerAcceptsIt() throws Exception {
        AutoSwitchHAService haService = masterHAService();
        AtomicReference<Set<Long>> askedOfController = new AtomicReference<>();
        haService.registerSyncStateSetChangedListener(askedOfController::set);

        // The slave goes away: the master's HA connection to it closes (removeConnection)
        slave.shutdown();
        await().atMost(30, TimeUnit.SECONDS).until(() -> haService.getConnectionCount().get() == 0
            && askedOfController.get() != null);
        assertEquals(syncStateSet(MASTER_ID), askedOfController.get());
        assertTrue(haService.isSynchronizingSyncStateSet());

        // The controller has not accepted the shrink: the acks still wait for the slave
        Set<Long> acksWaitFor = haService.getSyncStateSet();
        master.getMessageStoreConfig().setSlaveTimeout(1_000);
        PutMessageStatus status = master.putMessage(buildMessage()).getPutMessageStatus();
        assertEquals("SyncStateSet before the controller accepted the shrink to [1] (a SYNC put stored only on "
            + "the master meanwhile was answered " + status + ")", syncStateSet(MASTER_ID, SLAVE_ID), acksWaitFor);
        assertEquals(PutMessageStatus.FLUSH_SLAVE_TIMEOUT, status);

        // The controller accepts it: the master alone is the SyncStateSet and acknowledges alone
        haService.setSyncStateSet(syncStateSet(MASTER_ID));
        assertEquals(PutMessageStatus.PUT_OK, master.putMessage(buildMessage()).getPutMessageStatus());
    }

    @After
    public void tearDown() {
        for (DefaultMessageStore store : Arrays.asList(slave, master)) {
            if (store != null) {
                store.shutdown();
                store.destroy();
            }
        }
        UtilAll.deleteFile(new File(storeRoot));
    }

    private AutoSwitchHAService masterHAService() {
        return (AutoSwitchHAService) master.getHaService();
    }

    private DefaultMessageStore buildMessageStore(String name, long brokerId, BrokerRole role, int haPort)
        throws Exception {
        String dir = storeRoot + File.separator + name;
        MessageStoreConfig storeConfig = new MessageStoreConfig();
        storeConfig.setBrokerRole(role);
        storeConfig.setAllAckInSyncStateSet(true);
        storeConfig.setHaListenPort(haPort);
        storeConfig.setHaSendHeartbeatInterval(1000);
        storeConfig.setStorePathRootDir(dir);
        storeConfig.setStorePathCommitLog(dir + File.separator + "commitlog");
        storeConfig.setStorePathEpochFile(dir + File.separator + "EpochFileCache");
        storeConfig.setMappedFileSizeCommitLog(1024 * 1024);
        storeConfig.setMappedFileSizeConsumeQueue(1024 * 1024);
        storeConfig.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        BrokerConfig brokerConfig = new BrokerConfig();
        brokerConfig.setBrokerId(brokerId);
        brokerConfig.setEnableControllerMode(true);
        return new DefaultMessageStore(storeConfig, brokerStatsManager, null, brokerConfig, new ConcurrentHashMap<>());
    }

    private static Set<Long> syncStateSet(Long... brokerIds) {
        return new HashSet<>(Arrays.asList(brokerIds));
    }

    private static int freePort() throws Exception {
        try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return socket.getLocalPort();
        }
    }

    private static MessageExtBrokerInner buildMessage() throws Exception {
        MessageExtBrokerInner msg = new MessageExtBrokerInner();
        msg.setTopic("AllAckTopic");
        msg.setTags("TAG1");
        msg.setBody("replicated to every replica of the SyncStateSet".getBytes());
        msg.setQueueId(0);
        msg.setBornTimestamp(System.currentTimeMillis());
        msg.setBornHost(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        msg.setStoreHost(new InetSocketAddress(InetAddress.getLoopbackAddress(), 10911));
        msg.setPropertiesString(MessageDecoder.messageProperties2String(msg.getProperties()));
        return msg;
    }
}
