package org.apache.iceberg.rest;

import java.net.InetSocketAddress;
import java.util.HashMap;
import java.util.Map;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/**
 * Apache Iceberg's test REST catalog server ({@link RESTCatalogServer}) on a loopback address.
 *
 * <p>{@code RESTCatalogServer} listens on every interface; this launcher serves the same
 * servlet and adapter ({@link RESTServerCatalogAdapter} over the backend catalog) on
 * {@code 127.0.0.1} only. It lives in Iceberg's package because the adapter and the catalog
 * context are package-private there. The catalog's properties come from {@code CATALOG_*}
 * environment variables exactly as for {@code RESTCatalogServer} ({@code CATALOG_REST_PORT},
 * {@code CATALOG_URI}, {@code CATALOG_WAREHOUSE}, ...). It stops when its standard input closes,
 * so it never outlives the process that started it.
 */
public final class LoopbackCatalogServer {
  private LoopbackCatalogServer() {}

  public static void main(String[] args) throws Exception {
    Map<String, String> properties = new HashMap<>(RCKUtils.environmentCatalogConfig());
    properties.putIfAbsent("catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog");
    properties.putIfAbsent("jdbc.schema-version", "V1");
    int port = Integer.parseInt(properties.getOrDefault(RESTCatalogServer.REST_PORT, "8181"));
    // Hadoop's Configuration (HadoopFileIO's) comes from pyspark's hadoop-client jars at run time
    Object hadoopConf =
        Class.forName("org.apache.hadoop.conf.Configuration").getConstructor().newInstance();
    Catalog catalog = CatalogUtil.buildIcebergCatalog("rest_backend", properties, hadoopConf);
    RESTCatalogServer.CatalogContext context = new RESTCatalogServer.CatalogContext(catalog, properties);

    ServletContextHandler handler = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    handler.addServlet(
        new ServletHolder(new RESTCatalogServlet(new RESTServerCatalogAdapter(context))), "/*");
    Server server = new Server(new InetSocketAddress("127.0.0.1", port));
    server.setHandler(handler);
    server.start();
    System.out.println("rest catalog listening on 127.0.0.1:" + port);
    System.out.flush();
    while (System.in.read() != -1) {
      // a closed standard input means the process that started this one is gone
    }
    server.stop();
    System.exit(0);
  }
}
