// Starts DynamoDB Local bound to 127.0.0.1 only.
//
// `java -jar DynamoDBLocal.jar` listens on every interface and has no host flag. This launcher builds the
// server the same way the jar's main does, sets each Jetty connector's host to 127.0.0.1 before start(),
// then blocks. Run it as a source file:
//   java -Djava.library.path=LIB -cp DynamoDBLocal.jar:LIB/* DynamoDbLocalLauncher.java -inMemory -port N
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

public class DynamoDbLocalLauncher {
    public static void main(String[] args) throws Exception {
        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
        Field field = DynamoDBProxyServer.class.getDeclaredField("server");
        field.setAccessible(true);
        Server jetty = (Server) field.get(proxy);
        int bound = 0;
        for (Connector connector : jetty.getConnectors()) {
            if (connector instanceof ServerConnector) {
                ((ServerConnector) connector).setHost("127.0.0.1");
                bound++;
            }
        }
        if (bound == 0) {
            throw new IllegalStateException("no Jetty ServerConnector found: refusing to listen on all interfaces");
        }
        proxy.start();
        System.out.println("DynamoDB Local listening on 127.0.0.1");
        proxy.join();
    }
}
